"""Cache entries made whole or not at all: written into a staging folder or file beside the
entry (`.<name>.<random>`), then renamed into place.

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
