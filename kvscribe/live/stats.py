"""What a live session measured: commit latency, compute load, dropped audio, memory over time."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kvscribe import setting_rows as row
from kvscribe.contract import DecoderReport
from kvscribe.machine.memtrace import MAX_SAMPLES as _MAX_SAMPLES
from kvscribe.machine.memtrace import current_rss_bytes, peak_rss_bytes
from kvscribe.stats import CpuClock, KvTally


def percentile(values: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))]


@dataclass
class LiveStats:
    backend: str
    profile: str
    model: str
    source: str
    paced: bool  # audio arrived at the speed it was spoken: latencies mean something
    device: str = ""
    notes: list[str] = field(default_factory=list)  # from loading, e.g. another device
    settings: dict[str, str] = field(default_factory=dict)
    load_seconds: float = 0.0
    audio_seconds: float = 0.0
    busy_seconds: float = 0.0  # VAD + decoding: the compute a live stream costs
    dropped_seconds: float = 0.0
    input_overflows: int = 0  # times the device lost audio before kvscribe got it
    utterances: int = 0
    latencies: list[float] = field(default_factory=list)  # utterance end -> its text committed
    # The latencies of utterances committed at a pause; the others waited for their end (a
    # short one waits longer: Whisper reads it better with what may follow).
    at_pause: list[float] = field(default_factory=list)
    decodes: int = 0
    decode_seconds: list[float] = field(default_factory=list)  # the recent ones' (p50)
    tails_read_again: int = 0  # decodes whose words stopped short of their speech, read on
    held_back: int = 0  # utterance ends whose unsure last words waited for more speech
    held_resumed: int = 0  # and of those, the ones speech continued (read again with it)
    kv: KvTally = field(default_factory=KvTally)  # the same figures and notes as file runs
    memory: list[tuple[float, int]] = field(default_factory=list)  # (audio seconds, RSS bytes)
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None
    # Where the session is the process's whole work (`kvscribe mic`, not a server's
    # session): the CPU it used, for the cores-busy figure.
    cpu: CpuClock | None = None

    def record_utterance(self, latency: float, committed_at_pause: bool) -> None:
        self.utterances += 1
        self.latencies.append(latency)
        if committed_at_pause:
            self.at_pause.append(latency)

    def record_decode(self, seconds: float, report: DecoderReport) -> None:
        self.decodes += 1
        self.decode_seconds.append(seconds)
        self.kv.add(report)
        self.settings.update(report.settings)  # the decoding it ran, worded as for files
        if row.PREVIOUS_TEXT in self.settings:  # a file's windows carry text; a buffer has one
            self.settings[row.PREVIOUS_TEXT] = "not used live: each decode reads one buffer"
        if len(self.decode_seconds) > 4 * _MAX_SAMPLES:  # long sessions: keep the recent ones
            del self.decode_seconds[:_MAX_SAMPLES]

    def sample_memory(self) -> None:
        rss = current_rss_bytes()
        if rss is None:
            return
        self.memory.append((round(self.audio_seconds, 1), rss))
        if len(self.memory) > _MAX_SAMPLES:
            self.memory = self.memory[::2]

    @property
    def kv_bytes(self) -> int:
        return self.kv.self_peak_bytes + self.kv.cross_bytes

    def finish(self) -> None:
        self.finished = time.perf_counter()
        if self.cpu is not None:
            self.cpu.stop()
        self.sample_memory()

    def memory_growth(self) -> tuple[int, int] | None:
        """RSS after the first utterances had warmed the engine up (the sample a quarter into
        the session) and at the end; None for sessions too short to tell."""
        if len(self.memory) < 4:
            return None
        return self.memory[len(self.memory) // 4][1], self.memory[-1][1]

    def to_dict(self) -> dict[str, Any]:
        wall = (self.finished or time.perf_counter()) - self.started
        growth = self.memory_growth()
        return {
            "backend": self.backend,
            "profile": self.profile,
            "model": self.model,
            "device": self.device,
            "notes": list(self.notes),
            "source": self.source,
            "paced": self.paced,
            "settings": self.settings,
            "load_seconds": round(self.load_seconds, 3),
            "audio_seconds": round(self.audio_seconds, 3),
            "wall_seconds": round(wall, 3),
            "busy_seconds": round(self.busy_seconds, 3),
            "real_time_factor": _ratio(self.busy_seconds, self.audio_seconds),
            **(self.cpu.figures(wall) if self.cpu is not None else {}),
            "dropped_audio_seconds": round(self.dropped_seconds, 3),
            "input_overflows": self.input_overflows,
            "utterances": self.utterances,
            "latency_p50_seconds": _rounded(percentile(self.latencies, 0.5)),
            "latency_p95_seconds": _rounded(percentile(self.latencies, 0.95)),
            "latencies_seconds": [round(x, 3) for x in self.latencies],
            "utterances_at_pause": len(self.at_pause),
            "latencies_at_pause_seconds": [round(x, 3) for x in self.at_pause],
            "latency_at_pause_p50_seconds": _rounded(percentile(self.at_pause, 0.5)),
            "decodes": self.decodes,
            "decode_p50_seconds": _rounded(percentile(self.decode_seconds, 0.5)),
            "tails_read_again": self.tails_read_again,
            "held_back": self.held_back,
            "held_resumed": self.held_resumed,
            **self.kv.to_dict(),
            "peak_rss_bytes": peak_rss_bytes(),
            "rss_after_warmup_bytes": growth[0] if growth else None,
            "rss_end_bytes": growth[1] if growth else None,
            "memory_samples": [[t, rss] for t, rss in self.memory],
        }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 4) if b else None
