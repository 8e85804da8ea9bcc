"""Temporary folders named by the process that made them, so that a process killed before
its cleanup could run (SIGKILL, the OOM killer) leaves nothing behind for good: the next
process that makes one of the same kind removes those of processes no longer running.

Each holds whole recordings: a pipe's audio spooled to a file (`kvscribe/audio/stdin.py`),
the files a `--cluster` driver shipped to an actor (`kvscribe/cluster/actor.py`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def prefix(kind: str) -> str:
    """What the folders of `kind` are named by: `kvscribe-<kind>-<pid>-<random>`."""
    return f"kvscribe-{kind}-"


@contextmanager
def spool_folder(kind: str) -> Iterator[Path]:
    """A private temporary folder of `kind`, removed on exit, after the orphans of `kind`."""
    remove_orphans(kind)
    with tempfile.TemporaryDirectory(prefix=f"{prefix(kind)}{os.getpid()}-") as folder:
        yield Path(folder)


def remove_orphans(kind: str, folder: Path | None = None) -> list[Path]:
    """The folders of `kind` in `folder` (the temporary one) whose process is gone, removed;
    a running process's, and other users', left alone."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in Path(folder or tempfile.gettempdir()).iterdir():
            pid = _made_by(entry.name, kind)
            if pid is None or _running(pid) or entry.lstat().st_uid != os.getuid():
                continue
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _made_by(name: str, kind: str) -> int | None:
    start = prefix(kind)
    pid = name[len(start) :].split("-", 1)[0] if name.startswith(start) else ""
    return int(pid) if pid.isdigit() else None


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: running
        pass
    return True
