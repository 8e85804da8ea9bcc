"""One report per run: what was run, how long it took, what memory it held.

Figures are measured (perf_counter, getrusage) except KV bytes from engines
that do not expose their cache, which are flagged as estimated, and whisper.cpp's
beam-search self-attention figure, which kvscribe derives (see kv_provenance).
Bytes are plain byte counts; the terminal shows them in decimal MB (10^6 bytes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kvscribe.contract import DecoderReport
from kvscribe.machine.capacity import process_cpu_seconds, usable_cores
from kvscribe.machine.memtrace import MemoryTrace, peak_rss_bytes
from kvscribe.provenance import ESTIMATED, MEASURED, make_provenance, weakest_provenance


@dataclass
class KvTally:
    """The KV figures of many decodes, kept as they come: the largest bytes, each figure's
    weakest provenance and every policy part the backend could not honour. One rule for a
    file run's report and a live session's (which cannot keep every decode's report)."""

    self_peak_bytes: int = 0
    self_full_bytes: int = 0
    cross_bytes: int = 0
    batch_size: int = 1  # the largest batch decoded: the bytes above are that batch's totals
    # Per figure, the weakest seen (none seen: nothing is claimed, so nothing is flagged).
    provenance: dict[str, str] = field(default_factory=lambda: make_provenance(MEASURED))
    not_applicable: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, reports: list[DecoderReport]) -> KvTally:
        tally = cls()
        for report in reports:
            tally.add(report)
        return tally

    def add(self, report: DecoderReport) -> None:
        self.self_peak_bytes = max(self.self_peak_bytes, report.kv_self_peak_bytes)
        self.self_full_bytes = max(self.self_full_bytes, report.kv_self_full_bytes)
        self.cross_bytes = max(self.cross_bytes, report.kv_cross_bytes)
        self.batch_size = max(self.batch_size, report.batch_size)
        self.provenance = weakest_provenance([self.provenance, report.kv_provenance])
        self.not_applicable.update(report.not_applicable)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kv_self_peak_bytes": self.self_peak_bytes,
            "kv_self_full_bytes": self.self_full_bytes,
            "kv_cross_bytes": self.cross_bytes,
            "kv_batch_size": self.batch_size,
            "kv_provenance": dict(self.provenance),  # per figure: measured/derived/estimated
            "kv_estimated": ESTIMATED in self.provenance.values(),  # kept for older readers
            "not_applicable": sorted(self.not_applicable),
        }


@dataclass
class FileStats:
    source: str
    audio_seconds: float = 0.0
    decode_seconds: float = 0.0
    first_segment_seconds: float | None = None
    language: str | None = None
    language_probability: float | None = None  # None: given, or not detected
    report: DecoderReport | None = None
    error: str | None = None
    memory: MemoryTrace | None = None  # RSS as the file's audio was decoded


@dataclass
class RunStats:
    backend: str
    profile: str
    model: str
    device: str = ""
    settings: dict[str, str] = field(default_factory=dict)
    load_seconds: float = 0.0
    files: list[FileStats] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    finished: float | None = None
    worker_peak_rss: int | None = None  # the largest worker process's (batch --jobs N)
    notes: list[str] = field(default_factory=list)  # e.g. why the device differs from the asked
    # Where the run is the whole process's work (a command's files, not a server's
    # request): the CPU it used, for the cores-busy figure. None: no such figure.
    cpu: CpuClock | None = None

    def finish(self) -> None:
        self.finished = time.perf_counter()
        if self.cpu is not None:
            self.cpu.stop()

    @property
    def wall_seconds(self) -> float:
        return (self.finished or time.perf_counter()) - self.started

    @property
    def done(self) -> list[FileStats]:
        return [f for f in self.files if f.error is None and f.report is not None]

    def to_dict(self) -> dict[str, Any]:
        done = self.done
        audio = sum(f.audio_seconds for f in done)
        wall = self.wall_seconds  # read once: an unfinished run's clock moves between reads
        decode = sum(f.decode_seconds for f in done)
        tokens = sum(f.report.tokens for f in done)
        reports = [f.report for f in done]
        firsts = [f.first_segment_seconds for f in done if f.first_segment_seconds is not None]
        steps = sorted(t for r in reports for t in r.step_seconds)
        encoders = [r.encoder_seconds for r in reports if r.encoder_seconds is not None]
        first_tokens = [r.first_token_seconds for r in reports if r.first_token_seconds is not None]
        return {
            "backend": self.backend,
            "profile": self.profile,
            "model": self.model,
            "device": self.device,
            "settings": self.settings,
            "files_done": len(done),
            "files_failed": len(self.files) - len(done),
            "audio_seconds": round(audio, 3),
            "wall_seconds": round(wall, 3),
            "real_time_factor": round(wall / audio, 4) if audio else None,
            "load_seconds": round(self.load_seconds, 3),
            "transcribe_seconds": round(decode, 3),
            "first_segment_seconds": round(min(firsts), 3) if firsts else None,
            "tokens_decoded": tokens,
            "ms_per_token_incl_encoder": round(1000 * decode / tokens, 2) if tokens else None,
            "encoder_seconds": round(sum(encoders), 3) if encoders else None,
            "decode_ms_per_token_p50": _percentile_ms(steps, 0.50),
            "decode_ms_per_token_p95": _percentile_ms(steps, 0.95),
            "first_token_seconds": round(min(first_tokens), 3) if first_tokens else None,
            "recompute_macs": sum(r.recompute_macs for r in reports),
            # Speech every read of it skipped (batched decoders): missing from the text.
            "speech_unread_seconds": round(sum(r.unread_speech_seconds for r in reports), 2),
            "speech_unread_stretches": sum(r.unread_stretches for r in reports),
            **KvTally.of(reports).to_dict(),
            "notes": list(self.notes),
            "peak_rss_bytes": max(
                peak_rss_bytes() or 0, self.worker_peak_rss or 0, _largest_sampled(done)
            )
            or None,
            **_rss_over_time(done),
            **(self.cpu.figures(wall) if self.cpu is not None else {}),
            "stage_seconds": _stages(reports),
            **_engine_figures(reports),
            "files": [_file_dict(f) for f in self.files],
        }


def _engine_figures(reports: list[DecoderReport]) -> dict[str, Any]:
    """What an engine reported about itself: buffers (largest seen), timings and runs (summed),
    and its child process's peak RSS. Empty for engines that report nothing."""
    memory: dict[str, int] = {}
    kv_types: dict[str, str] = {}
    f16_bytes: dict[str, int] = {}
    timings: dict[str, float] = {}
    runs: dict[str, int] = {}
    for report in reports:
        for key, value in report.engine_memory_bytes.items():
            memory[key] = max(memory.get(key, 0), value)
        kv_types.update(report.engine_kv_types)
        for key, value in report.engine_f16_bytes.items():
            f16_bytes[key] = max(f16_bytes.get(key, 0), value)
        for key, value in report.engine_timings_ms.items():
            timings[key] = round(timings.get(key, 0.0) + value, 2)
        for key, value in report.engine_runs.items():
            runs[key] = runs.get(key, 0) + value
    peaks = [r.engine_peak_rss_bytes for r in reports if r.engine_peak_rss_bytes is not None]
    if not (memory or timings or peaks):
        return {}
    return {
        "engine_memory_bytes": memory,
        "engine_kv_types": kv_types,
        "engine_kv_f16_bytes_derived": f16_bytes,
        "engine_timings_ms": timings,
        "engine_runs": runs,
        "engine_peak_rss_bytes": max(peaks) if peaks else None,
    }


def _percentile_ms(ordered: list[float], fraction: float) -> float | None:
    """Nearest-rank percentile of sorted seconds, in milliseconds."""
    if not ordered:
        return None
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return round(1000 * ordered[index], 2)


@dataclass
class CpuClock:
    """The CPU seconds this process uses from its start (process_cpu_seconds) to `stop()`,
    and the fraction of the usable cores they kept busy over a wall time (file runs and
    live sessions alike)."""

    started: float = field(default_factory=process_cpu_seconds)
    stopped: float | None = None

    def stop(self) -> None:
        self.stopped = process_cpu_seconds()

    def figures(self, wall: float) -> dict[str, Any]:
        if wall <= 0:
            return {}
        cpu = (self.stopped if self.stopped is not None else process_cpu_seconds()) - self.started
        cores = usable_cores()
        # CPU time comes in clock ticks (10 ms): over a run of a few milliseconds one tick
        # reads as more than every core; no run uses more than all of them.
        busy = min(1.0, cpu / (wall * cores))
        return {"cpu_seconds": round(cpu, 3), "cores": cores, "cores_busy": round(busy, 3)}


def _stages(reports: list[DecoderReport]) -> dict[str, float]:
    """Seconds by stage, summed over the files, in the order the stages first ran."""
    stages: dict[str, float] = {}
    for report in reports:
        for name, seconds in report.stage_seconds.items():
            stages[name] = stages.get(name, 0.0) + seconds
    return {name: round(seconds, 3) for name, seconds in stages.items()}


def _largest_sampled(done: list[FileStats]) -> int:
    """The largest RSS sampled over the files. Linux updates the peak getrusage reports
    lazily (when memory is unmapped), so an RSS read from /proc just before can exceed it
    by a few pages; the peak is never below what was seen."""
    return max(
        (rss for f in done if f.memory is not None for _, rss in f.memory.samples), default=0
    )


def _rss_over_time(done: list[FileStats]) -> dict[str, Any]:
    """RSS at the first file's start and warm-up and at the last file's end, as the process
    that decoded them saw it (with --jobs N, a worker's; each file's entry has its own)."""
    traces = [f.memory.to_dict() for f in done if f.memory is not None and f.memory.samples]
    if not traces:
        return {}
    return {
        "rss_start_bytes": traces[0]["rss_start_bytes"],
        "rss_after_warmup_bytes": traces[0]["rss_after_warmup_bytes"],
        "rss_end_bytes": traces[-1]["rss_end_bytes"],
    }


def _file_dict(f: FileStats) -> dict[str, Any]:
    entry: dict[str, Any] = {"source": f.source, "audio_seconds": round(f.audio_seconds, 3)}
    if f.error is not None:
        entry["error"] = f.error
        return entry
    entry.update(
        language=f.language,
        language_probability=(
            round(f.language_probability, 4) if f.language_probability is not None else None
        ),
        transcribe_seconds=round(f.decode_seconds, 3),
        first_segment_seconds=(
            round(f.first_segment_seconds, 3) if f.first_segment_seconds is not None else None
        ),
        tokens_decoded=f.report.tokens if f.report else 0,
        windows=f.report.windows if f.report else 0,
        batch_size=f.report.batch_size if f.report else 1,
        speech_unread_seconds=round(f.report.unread_speech_seconds, 2) if f.report else 0.0,
    )
    if f.memory is not None and f.memory.samples:
        entry.update(f.memory.to_dict())
    return entry
