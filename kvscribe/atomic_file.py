"""Whole-or-nothing file writes: a temp file in the same folder, fsync, then rename.

Transcripts, stats JSON and benchmark results all go through here, so an interrupted
run (Ctrl-C, kill, a full disk) never leaves half a file where a whole one was expected.
A path that is a symlink is written at its target (the link stays); one that is not a
regular file (`/dev/stdout`, a FIFO, a device) is written into, never replaced by a file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from kvscribe.errors import OutputError

# The temporary name's marker: `.<name>.kvscribe-<random>.part` (the stale ones a killed run
# leaves are recognised by it: kvscribe.batch).
TEMP_MARKER = ".kvscribe-"


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` via a temp file and rename; clean up on any failure. A Ctrl-C
    or SIGTERM meanwhile is held until the file is whole, then raised."""
    with _interrupts_held():
        _write_whole(path, text)


def _write_whole(path: Path, text: str) -> None:
    with contextlib.suppress(OSError):
        if not stat.S_ISREG(os.stat(path).st_mode):  # follows a symlink (/dev/stdout is one)
            _write_into(path, text)
            return
    path = Path(os.path.realpath(path)) if os.path.islink(path) else path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{path.name}{TEMP_MARKER}", suffix=".part", dir=path.parent
        )
    except OSError as exc:
        raise _error(path, "cannot write here", exc) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise _error(path, "write failed", exc) from exc
        raise


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held while inside, the first raised after through the handler
    before. A second Ctrl-C that stops a batch lands while its manifest compacts; raised
    there it could leave the temp file behind (a `finally` is interrupted too). Only the
    main thread runs Python's signal handlers, so only there is anything to hold."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    # A handler set outside Python reads as None and could not be put back: left as it is.
    ours = [number for number in _HELD if signal.getsignal(number) is not None]
    before = {number: signal.signal(number, lambda n, _: held.append(n)) for number in ours}
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
    if held:
        signal.raise_signal(held[0])


_HELD = (signal.SIGINT, signal.SIGTERM)


def _write_into(path: Path, text: str) -> None:
    """A pipe, a terminal or a device: written as it is (there is nothing to rename)."""
    try:
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
    except OSError as exc:
        raise _error(path, "write failed", exc) from exc


def _error(path: Path | None, what: str, exc: OSError) -> OutputError:
    subject = None if path is None else str(path)
    return OutputError(f"{what}: {exc.strerror}", subject=subject, hint=_hint(exc))


def write_failure(exc: OSError) -> OutputError | None:
    """A full disk met outside a file kvscribe names (stdout, a transcript appended as it
    is spoken), as the one-line error it is; None for any other OSError."""
    if exc.errno not in FULL:
        return None
    return _error(Path(exc.filename) if exc.filename else None, "write failed", exc)


# What a failed write's errno says: the disk, not a bug (a write to stdout meets them too).
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _hint(exc: OSError) -> str:
    """The fix for this failure, not a guess: a full disk, a folder in the way, a file
    where a folder must be, or permissions."""
    if exc.errno in FULL:
        return "free some disk space or write elsewhere"
    if exc.errno == errno.EISDIR:
        return "a folder stands where the file goes: move it or write elsewhere"
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        return "a file stands where a folder must be: move it or write elsewhere"
    return "write elsewhere or fix the permissions"
