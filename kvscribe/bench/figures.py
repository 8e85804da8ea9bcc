"""From raw cell runs to the figures a bench reports, and the seed claims checked."""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field

from kvscribe.bench.cells import Cell, mirror_of
from kvscribe.bench.clips import Clip
from kvscribe.bench.wer import pooled_wer
from kvscribe.bench.worker import CellRun
from kvscribe.provenance import ESTIMATED, weakest_provenance


@dataclass
class CellFigures:
    label: str
    kind: str
    backend: str
    model: str
    profile: str
    policy: str  # "self / cross" as run
    reference: bool
    wer: float
    seconds: float  # median over repeats of the summed per-clip wall time
    real_time_factor: float
    tokens: int
    kv_self_peak_bytes: int | None
    kv_cross_bytes: int | None
    kv_estimated: bool  # kept for older readers: kv_provenance says it per figure
    decode_ms_p50: float | None
    decode_ms_p95: float | None
    encoder_ms: float | None  # per 30 s window
    peak_rss_bytes: int | None  # the cell's process, plus whisper-cli's child where there is one
    wer_delta: float | None = None  # vs the full cache of the same backend and model
    kv_vs_full_pct: float | None = None  # (self + cross) vs the full cache, same backend/model
    vs_kvscribe: float | None = None  # baselines: kvscribe's time / this engine's time
    settings: dict[str, str] = field(default_factory=dict)
    kv_trace: list[tuple[int, int]] = field(default_factory=list)
    # Per KV figure ("self", "cross"): measured, derived or estimated (kvscribe.provenance).
    kv_provenance: dict[str, str] = field(default_factory=dict)
    device: str = "cpu"  # where the cell's engine actually ran
    device_note: str | None = None  # why that is not the device the bench asked for
    unbatched_label: str = ""  # the label without the batch size: one setting's rows share it
    batch_size: int | None = None  # asked for (None: the profile's)
    batch_size_run: int = 1  # the largest the backend reported: audio <= 30 s is not batched
    audio_seconds_per_second: float = 0.0  # throughput: audio length / wall time (1 / RTF)
    speedup_vs_batch_1: float | None = None  # the same setting's batch-1 wall time / this one's
    warmed_up: list[str] = field(default_factory=list)  # clips its process decoded untimed first

    @property
    def kv_total_bytes(self) -> int | None:
        if self.kv_self_peak_bytes is None or self.kv_cross_bytes is None:
            return None
        return self.kv_self_peak_bytes + self.kv_cross_bytes


def summarise(
    cell: Cell, runs: list[CellRun], clips: list[Clip], device_note: str | None = None
) -> CellFigures:
    """One cell's figures: WER from the last repeat, times as medians over repeats."""
    last = runs[-1].clips
    references = {clip.name: clip.reference for clip in clips}
    audio = sum(clip.seconds for clip in clips)
    seconds = statistics.median(sum(c.seconds for c in run.clips) for run in runs)
    steps = sorted(s for c in last for s in c.step_seconds)
    engine_steps = [c.engine_step_ms for c in last if c.engine_step_ms is not None]
    windows = sum(c.windows for c in last)
    encoder = [c.encoder_seconds for c in last if c.encoder_seconds is not None]
    engine_rss = max((c.engine_peak_rss_bytes or 0 for c in last), default=0)
    longest = max(last, key=lambda c: len(c.kv_trace))
    kv_self = [c.kv_self_peak_bytes for c in last if c.kv_self_peak_bytes is not None]
    kv_cross = [c.kv_cross_bytes for c in last if c.kv_cross_bytes is not None]
    p50, p95 = _percentile(steps, 0.5), _percentile(steps, 0.95)
    provenance = weakest_provenance(c.kv_provenance for c in last)
    if p50 is None and engine_steps:
        p50 = round(statistics.mean(engine_steps), 2)  # whisper.cpp reports means only
    return CellFigures(
        label=cell.label,
        kind=cell.kind,
        backend=cell.backend,
        model=cell.model or "tiny.en",
        profile=cell.profile,
        policy=f"{cell.kv_self} / {cell.kv_cross}" if cell.kv_self else "profile's",
        reference=cell.is_reference,
        wer=round(pooled_wer([(references[c.name], c.text) for c in last]), 4),
        seconds=round(seconds, 3),
        real_time_factor=round(seconds / audio, 4) if audio else 0.0,
        tokens=sum(c.tokens for c in last),
        kv_self_peak_bytes=max(kv_self) if kv_self else None,
        kv_cross_bytes=max(kv_cross) if kv_cross else None,
        kv_estimated=ESTIMATED in provenance.values(),
        decode_ms_p50=p50,
        decode_ms_p95=p95,
        encoder_ms=round(1000 * sum(encoder) / windows, 1) if encoder and windows else None,
        peak_rss_bytes=max(r.peak_rss_bytes or 0 for r in runs) + engine_rss or None,
        settings=runs[-1].settings,
        kv_trace=longest.kv_trace,
        kv_provenance=provenance,
        device=runs[-1].device,
        device_note=device_note,
        unbatched_label=cell.unbatched_label,
        batch_size=cell.batch_size,
        batch_size_run=max((c.batch_size for c in last), default=1),
        audio_seconds_per_second=round(audio / seconds, 3) if seconds else 0.0,
        warmed_up=runs[0].warmed_up,
    )


def compare(cells: list[Cell], figures: list[CellFigures]) -> None:
    """Fill deltas against each backend/model's full-cache cell at the same batch size (KV
    figures are batch totals: only like compares with like), speed-ups against the same
    setting at batch 1, and baseline ratios."""
    by_cell = dict(zip(cells, figures, strict=True))
    for cell, fig in by_cell.items():
        reference = next(
            (
                by_cell[c]
                for c in cells
                if c.is_reference
                and (c.backend, c.model, c.batch_size)
                == (cell.backend, cell.model, cell.batch_size)
            ),
            None,
        )
        if cell.kind == "kvscribe" and reference is not None:
            fig.wer_delta = round(fig.wer - reference.wer, 4)
            if fig.kv_total_bytes is not None and reference.kv_total_bytes:
                fig.kv_vs_full_pct = round(100 * fig.kv_total_bytes / reference.kv_total_bytes, 1)
        batch_one = by_cell.get(dataclasses.replace(cell, batch_size=1))
        if cell.batch_size is not None and batch_one is not None and fig.seconds:
            fig.speedup_vs_batch_1 = round(batch_one.seconds / fig.seconds, 3)
        mirror = mirror_of(cell, cells)
        if mirror is not None and fig.seconds:
            fig.vs_kvscribe = round(by_cell[mirror].seconds / fig.seconds, 3)


def batch_rows(figures: list[CellFigures]) -> list[CellFigures]:
    """The cells run at an asked batch size, each setting's rows together by batch size: the
    batch trade-off table (empty when no batch sizes were asked)."""
    batched = [f for f in figures if f.batch_size is not None]
    order = list(dict.fromkeys(f.unbatched_label for f in batched))
    return sorted(batched, key=lambda f: (order.index(f.unbatched_label), f.batch_size))


def _percentile(ordered: list[float], fraction: float) -> float | None:
    if not ordered:
        return None
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return round(1000 * ordered[index], 2)


# -- the seed's claims, next to what was measured ---------------------------------------------


@dataclass(frozen=True)
class Claim:
    claim: str
    measured: str
    verdict: str  # "holds", "does not hold", "not measured"


def claims(figures: list[CellFigures]) -> list[Claim]:
    """Each seed claim against the transformers cells of the first model that has them."""
    figures = _at_one_batch_size(figures)
    cells = {f.policy: f for f in figures if f.backend == "transformers" and f.kind == "kvscribe"}
    base = next(
        (
            f
            for f in figures
            if f.backend == "transformers" and f.profile == "cpu-laptop" and f.policy == "profile's"
        ),
        None,
    )
    found = []
    window = cells.get("window=256 / shared")
    found.append(
        _claim(
            "window 256: no audible quality drop",
            window,
            lambda w: (
                f"WER {w.wer_delta:+.3f} vs full, KV {w.kv_vs_full_pct:.0f} % of full",
                abs(w.wer_delta) <= 0.005,
            ),
        )
    )
    plain, sinks = cells.get("window=32 / shared"), cells.get("sink=4,window=32 / shared")
    found.append(
        _claim(
            "attention sinks restore most of the quality a short window loses",
            plain and sinks and (plain, sinks),
            lambda pair: (
                f"window=32: WER {pair[0].wer_delta:+.3f}; with 4 sinks: {pair[1].wer_delta:+.3f}",
                pair[0].wer_delta > 0 and pair[1].wer_delta <= 0.5 * pair[0].wer_delta,
            ),
        )
    )
    half = cells.get("full; half@layers=odd / shared")
    found.append(
        _claim(
            "half-layer caching costs 8-12 % compute",
            base and half and (base, half),
            lambda pair: _slower("half@layers=odd", pair, lambda pct: 8 <= pct <= 12),
        )
    )
    q8 = cells.get("q8_0 / shared")
    found.append(
        _claim(
            "Q8_0 cuts latency 30-40 %",
            base and q8 and (base, q8),
            lambda pair: _slower("q8_0", pair, lambda pct: -40 <= pct <= -30),
        )
    )
    found.append(_whispercpp_q8_0_claim(figures))
    return found


def _whispercpp_q8_0_claim(figures: list[CellFigures]) -> Claim:
    """The seed's Q8_0 claim for whisper.cpp's own caches (kvscribe's patched whisper-cli)."""
    cells = {
        f.policy: f
        for f in figures
        if f.backend == "whispercpp" and f.kind == "kvscribe" and f.profile == "cpu-laptop"
    }
    base, q8 = cells.get("profile's"), cells.get("q8_0 / shared,q8_0")

    def measure(pair):
        base, q8 = pair
        kv_pct = 100 * q8.kv_total_bytes / base.kv_total_bytes
        time_pct = 100 * (q8.seconds / base.seconds - 1)
        text = (
            f"whisper.cpp Q8_0 self + cross: KV {kv_pct:.0f} % of F16, {time_pct:+.0f} % wall time"
        )
        return text, kv_pct <= 55 and -40 <= time_pct <= -30

    return _claim(
        "whisper.cpp Q8_0 KV: memory -50 %, latency -30-40 %", base and q8 and (base, q8), measure
    )


def _at_one_batch_size(figures: list[CellFigures]) -> list[CellFigures]:
    """The claims compare policies at one batch size: the profile's when none was asked, else
    the smallest asked (batch 1: the sequential decoding the seed's figures come from)."""
    asked = sorted({f.batch_size for f in figures if f.batch_size is not None})
    chosen = asked[0] if asked else None
    return [f for f in figures if f.batch_size == chosen]


def _slower(name: str, pair, holds) -> tuple[str, bool]:
    base, cell = pair
    pct = 100 * (cell.seconds / base.seconds - 1)
    return f"{name}: {pct:+.0f} % wall time vs full (same beams, shared cross)", holds(pct)


def _claim(text: str, subject, measure) -> Claim:
    if not subject:
        return Claim(text, "not in this run", "not measured")
    try:
        measured, holds = measure(subject)
    except TypeError:  # a figure it needs is missing (no full-cache reference cell)
        return Claim(text, "no full-cache reference in this run", "not measured")
    return Claim(text, measured, "holds" if holds else "does not hold")
