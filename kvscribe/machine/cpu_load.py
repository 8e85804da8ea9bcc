"""How much of the cores other work takes: what a timing measured on this machine shared
them with, and whether the machine is quiet enough to time again.

A timing taken while something else runs (a build, a test suite, another transcription)
measures the share of the cores it got, not the code, and two engines timed one after the
other can get different shares. `OtherWork` measures, over a stretch of wall time, the
cores' busy time (Linux's /proc/stat, a VM's stolen time included) less this process's own
CPU time. Elsewhere nothing is measured (None): a timing is then taken as it comes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from kvscribe.machine.capacity import process_cpu_seconds

_STAT = Path("/proc/stat")
# /proc/stat's columns after "cpu": user nice system idle iowait irq softirq steal (guest
# time is already in user); idle and iowait are the cores' idle time.
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


def _cores_busy_seconds() -> tuple[float, int] | None:
    """The cores' busy seconds since boot, summed over them, and how many there are."""
    try:
        lines = _STAT.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    total = lines[0].split()
    if total[0] != "cpu":
        return None
    cores = sum(1 for line in lines[1:] if line.startswith("cpu"))
    ticks = sum(int(total[1 + column]) for column in _BUSY_COLUMNS if 1 + column < len(total))
    return ticks / os.sysconf("SC_CLK_TCK"), max(cores, 1)


class OtherWork:
    """Used as `with OtherWork() as other:`; afterwards `other.share` is the fraction of
    the cores (0-1) that work other than this process's kept busy meanwhile, or None where
    it cannot be read."""

    share: float | None = None

    def __enter__(self) -> OtherWork:
        self._start = (_cores_busy_seconds(), process_cpu_seconds(), time.perf_counter())
        return self

    def __exit__(self, *exc) -> None:
        cores_before, own_before, wall_before = self._start
        cores_after = _cores_busy_seconds()
        wall = time.perf_counter() - wall_before
        if cores_before is None or cores_after is None or wall <= 0:
            return
        busy = cores_after[0] - cores_before[0]
        own = process_cpu_seconds() - own_before
        self.share = min(1.0, max(0.0, busy - own) / (wall * cores_after[1]))


def quiet(below: float) -> bool:
    """Whether the last minute's load average is under `below` of the cores (False where
    it cannot be read)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return False
    return load < below * (os.cpu_count() or 1)
