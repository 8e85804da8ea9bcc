"""Cache entries made whole or not at all: written into a staging folder or file beside the
entry (`.<name>.<random>`), then renamed into place; and made once where several processes
need the same entry at once (made_once).

A process killed mid-write (SIGKILL, the OOM killer, a power cut) cannot remove its
staging copy, which may be hundreds of MB (a model's weights). The next process to make an
entry of the same name removes what was left beside it a day or more ago: no write takes
that long, and one in progress touches its folder or file as it goes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

STALE_AFTER_SECONDS = 24 * 3600


def staging_dir(target: Path) -> Path:
    """A new folder beside `target` to build it in, readable as the cache is (mkdtemp makes
    it private)."""
    _prepare(target)
    staging = Path(tempfile.mkdtemp(prefix=_prefix(target), dir=target.parent))
    staging.chmod(0o755)
    return staging


def staging_file(target: Path) -> Path:
    """A new empty file beside `target` to write it in, readable as the cache is (mkstemp
    makes it private)."""
    _prepare(target)
    handle, name = tempfile.mkstemp(prefix=_prefix(target), dir=target.parent)
    os.close(handle)
    os.chmod(name, 0o644)
    return Path(name)


def made_once(target: Path, made: Callable[[], bool], make: Callable[[], object]) -> None:
    """`make()` unless `made()`, asked again under `target`'s lock (one_maker)."""
    if made():
        return
    with one_maker(target):
        if not made():
            make()


@contextlib.contextmanager
def one_maker(target: Path) -> Iterator[None]:
    """Held while `target` is looked for and made: processes (or threads) that need the same
    entry at once take turns, and the later ones find the first one's entry (several first
    runs at once each converted the model and timed the encoders, beside each other). The
    lock is a file of its own under `.locks/` beside the entry, out of the stale sweep's
    way. Nothing is held where the cache cannot take it (read-only, or no flock): the
    writers then race as before, and one rename wins."""
    try:
        import fcntl

        folder = target.parent / ".locks"
        folder.mkdir(parents=True, exist_ok=True)
        handle = os.open(folder / f"{target.name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):  # a file system without flock: race as before
            fcntl.flock(handle, fcntl.LOCK_EX)  # let go when the handle closes or the process ends
        yield
    finally:
        os.close(handle)


def _prefix(target: Path) -> str:
    return f".{target.name}."


def _prepare(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale(target)


def sweep_stale(target: Path) -> list[Path]:
    """Remove the staging folders and files beside `target` untouched for a day or more;
    return them. Another process's current one is left alone (touched recently)."""
    prefix, cutoff = _prefix(target), time.time() - STALE_AFTER_SECONDS
    removed = []
    with contextlib.suppress(OSError):
        for entry in target.parent.iterdir():
            if entry.name.startswith(prefix) and _modified(entry) < cutoff:
                _remove(entry)
                removed.append(entry)
    return removed


def _modified(entry: Path) -> float:
    try:
        return entry.lstat().st_mtime
    except OSError:
        return time.time()  # gone already, or unreadable: not ours to remove


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()
