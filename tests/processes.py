"""Processes below a test's child, read from Linux's /proc (tests that kill one)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting to be reaped)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def workers_of(proc: subprocess.Popen, count: int, seconds: float = 60) -> set[int]:
    """A batch driver's `--jobs` worker processes once `count` are there (bounded wait;
    empty if they never were)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        workers = {pid for pid in _children(proc.pid) if b"spawn_main" in _cmdline(pid)}
        if len(workers) >= count:
            return workers
        time.sleep(0.01)
    return set()


def _cmdline(pid: int) -> bytes:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def whisper_cli_under(pid: int) -> list[int]:
    """whisper-cli processes transcribing anywhere below `pid` (a batch may run it from a
    worker); not the short `whisper-cli --help` that checks the binary first."""
    found, parents = [], [pid]
    while parents:
        children = _children(parents.pop())
        parents += children
        found += [c for c in children if _name(c) == "whisper-cli" and _transcribes(c)]
    return found


def _transcribes(pid: int) -> bool:
    try:
        arguments = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"-f" in arguments


def _name(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found
