"""Resident memory over a run, sampled as the audio advances: what shows whether memory
grows with a recording's length (a file run's and a live session's stats both keep one)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

MAX_SAMPLES = 720  # samples kept; past this, every other one goes (the span stays)


def current_rss_bytes() -> int | None:
    """This process's resident set size now (Linux /proc; elsewhere the peak stands in)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, ValueError, IndexError):
        from kvscribe.stats import peak_rss_bytes  # (stats imports this module)

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
