"""Whole-or-nothing file writes: a temp file in the same folder, fsync, then rename.

Transcripts, stats JSON and benchmark results all go through here, so an interrupted
run (Ctrl-C, kill, a full disk) never leaves half a file where a whole one was expected.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from kvscribe.errors import OutputError


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` via a temp file and rename; clean up on any failure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise OutputError(
            f"cannot write here: {exc.strerror}",
            subject=str(path),
            hint="choose another --output-dir or fix its permissions",
        ) from exc
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
            raise OutputError(
                f"write failed: {exc.strerror}",
                subject=str(path),
                hint="free some disk space or choose another --output-dir",
            ) from exc
        raise
