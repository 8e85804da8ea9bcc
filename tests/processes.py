"""Processes below a test's child, read from Linux's /proc (tests that kill one)."""

from __future__ import annotations

from pathlib import Path


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
