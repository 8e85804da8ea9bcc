"""Resident memory: this process's peak and current RSS from the OS, and RSS over a run,
sampled as the audio advances: what shows whether memory grows with a recording's length
(a file run's and a live session's stats both keep one)."""

from __future__ import annotations

import ctypes
import functools
import os
import sys
from dataclasses import dataclass, field
from typing import Any

MAX_SAMPLES = 720  # samples kept; past this, every other one goes (the span stays)


def maxrss_bytes(ru_maxrss: int) -> int:
    """`ru_maxrss` (getrusage, wait4) in bytes: macOS reports bytes, Linux and the BSDs KiB."""
    return ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024


def peak_rss_bytes() -> int | None:
    """This process's peak resident set size, from the OS."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    return maxrss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def current_rss_bytes() -> int | None:
    """This process's resident set size now (Linux /proc; elsewhere the peak stands in)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        return peak_rss_bytes()
    return pages * os.sysconf("SC_PAGE_SIZE")


@dataclass
class MemoryTrace:
    """(audio seconds reached, RSS bytes) samples of one file's run: at the start, after
    the first decoded window (the engine warmed up), every `every` seconds of audio, at the
    end."""

    every: float = 10.0
    samples: list[tuple[float, int]] = field(default_factory=list)
    warm_index: int | None = None

    def sample(self, at_seconds: float, force: bool = False) -> None:
        if not force and self.samples and at_seconds - self.samples[-1][0] < self.every:
            return
        rss = current_rss_bytes()
        if rss is None:
            return
        self.samples.append((round(at_seconds, 1), rss))
        if len(self.samples) > MAX_SAMPLES:
            self.samples = self.samples[:1] + self.samples[1::2]
            self.warm_index = None if self.warm_index is None else min(self.warm_index, 1)

    def warmed_up(self, at_seconds: float) -> None:
        self.sample(at_seconds, force=True)
        self.warm_index = len(self.samples) - 1

    def to_dict(self) -> dict[str, Any]:
        first = self.samples[0][1] if self.samples else None
        warm = self.samples[self.warm_index][1] if self.warm_index is not None else None
        return {
            "rss_start_bytes": first,
            "rss_after_warmup_bytes": warm,
            "rss_end_bytes": self.samples[-1][1] if self.samples else None,
            "memory_samples": [[at, rss] for at, rss in self.samples],
        }


@dataclass
class HeapTrimmer:
    """Hands the heap's freed pages back to the OS every `every` seconds of audio (glibc's
    malloc_trim; a no-op elsewhere). The engines allocate and free buffers of many sizes
    as they decode and glibc keeps what they free, so RSS settles higher the longer a
    file runs. One-off runs of a 60-minute file (ctranslate2, cpu-laptop, this machine):
    peak 598 MB without, 572 MB with this; trimming on every free
    (MALLOC_TRIM_THRESHOLD_=0) held 453 MB but took 124 s instead of 65 s, and
    MALLOC_MMAP_THRESHOLD_=1048576 held 459 MB in 114 s: set those yourself to trade
    time for memory."""

    every: float = 60.0
    last: float = 0.0

    def reached(self, at_seconds: float) -> None:
        if at_seconds - self.last >= self.every:
            self.last = at_seconds
            release_freed_memory()


def release_freed_memory() -> None:
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """glibc's malloc_trim, or None (not Linux, or a libc without it such as musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
