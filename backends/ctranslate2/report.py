"""What a ctranslate2 run reports: its settings, and KV figures estimated from the model's
dimensions (CTranslate2 does not expose its cache), for the sequential and batched paths.

CTranslate2 keeps every decoded position's K/V and one cross-attention copy per beam; the
rest of a profile's cache policy is reported as not applicable, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscribe import setting_rows as row
from kvscribe.backends.ctranslate2.silence import describe_vad
from kvscribe.backends.ctranslate2.windows import WindowCounter
from kvscribe.contract import DecodeRequest, DecoderReport
from kvscribe.kvcache import estimate
from kvscribe.models.ct2_file import WhisperDims
from kvscribe.provenance import ESTIMATED, make_provenance
from kvscribe.voice.regions import FILE_VAD

# The engine-threads row's note that a run made the model's second, every-thread load.
WHOLE_LOAD_NOTE = "the model loaded again with every thread"


@dataclass(frozen=True)
class ReportBasis:
    """What the figures are estimated from: the model's dimensions and compute type, and the
    profile's cache policy."""

    dims: WhisperDims
    compute_type: str
    kv_self: str
    kv_cross: str

    @property
    def value_bytes(self) -> int:
        return estimate.value_bytes(self.compute_type)


def base_report(
    basis: ReportBasis, settings: dict[str, str], beams: int, request: DecodeRequest
) -> DecoderReport:
    """A report for one decode of `beams` beams: the backend's `settings` and the request's."""
    report = DecoderReport(kv_provenance=make_provenance(ESTIMATED), settings=dict(settings))
    report.settings[row.BEAM_SIZE] = str(beams)
    report.settings[row.TEMPERATURE_FALLBACK] = request.fallback.describe()
    if request.word_timestamps:
        report.settings[row.WORD_TIMESTAMPS] = "cross-attention alignment (faster-whisper)"
    if request.vad is not None:
        report.settings[row.VAD_FILTER] = describe_vad(request.vad)
    report.kv_cross_bytes = estimate.cross_attention_bytes(basis.dims, beams, basis.value_bytes)
    report.not_applicable = not_applicable(basis.kv_self, basis.kv_cross, beams)
    return report


def batched_report(
    basis: ReportBasis,
    settings: dict[str, str],
    beams: int,
    request: DecodeRequest,
    batch: int,
    workers: int,
    chunks: int,
) -> DecoderReport:
    """A report for speech chunks decoded `batch` at a time by `workers` replicas."""
    report = base_report(basis, settings, beams, request)
    report.batch_size = batch
    report.settings.update({row.BATCH_SIZE: str(batch), row.PREVIOUS_TEXT: "off (batched)"})
    if workers > 1:
        report.settings[row.ENGINE_THREADS] = f"{workers} replicas x 1 thread (rows shared out)"
    if request.vad is not None:
        report.settings[row.VAD_FILTER] = "kvscribe's chunker (batched)"
        report.not_applicable.append(
            "vad min silence / pad: batched chunks keep the chunker's "
            f"({FILE_VAD.min_silence:g} s / {FILE_VAD.pad:g} s)"
        )
    report.kv_cross_bytes *= min(batch, max(1, chunks))
    return report


class ChunkTally:
    """What a file's batched chunks decoded: the positions of each (the self-attention
    estimate, WindowCounter) and how many were prompted with the text before them (dealt in
    lanes, kvscribe.chunk_rounds: a longer prompt than `plain_prompt` tokens)."""

    def __init__(self, dims, plain_prompt: int):
        self.windows = WindowCounter(dims, conditioned=False)
        self.prompted = 0
        self._plain_prompt = plain_prompt

    def seen(self, result) -> None:
        self.windows.add_chunk(len(result.tokens), result.prompt_length)
        self.prompted += result.prompt_length > self._plain_prompt

    def note_prompts(self, report: DecoderReport, in_lanes: bool, chunks: int) -> None:
        """The previous-text prompt row, where the chunks were dealt in lanes."""
        if in_lanes:
            report.settings[row.PREVIOUS_TEXT] = (
                f"{self.prompted} of {chunks} chunks (batched in lanes)"
            )


def count_windows(
    report: DecoderReport, basis: ReportBasis, windows: WindowCounter, beams: int, rows: int = 1
) -> None:
    """The decoded tokens and windows, and the self-attention cache they took (estimated:
    `rows` windows or chunks x `beams` at the longest one's positions; CTranslate2 keeps the
    full cache)."""
    windows.finish()
    report.tokens, report.windows = windows.decoded, windows.count
    report.kv_self_peak_bytes = estimate.self_attention_bytes(
        basis.dims, windows.peak_positions, beams * rows, basis.value_bytes
    )
    report.kv_self_full_bytes = report.kv_self_peak_bytes


def not_applicable(kv_self: str, kv_cross: str, beams: int) -> list[str]:
    notes = []
    if kv_self != "full":
        notes.append(f"self-attention policy '{kv_self}': CTranslate2 keeps every position")
    if kv_cross != "full" and beams > 1:
        notes.append(f"cross-attention policy '{kv_cross}': CTranslate2 keeps one copy per beam")
    elif kv_cross != "full":
        notes.append(f"cross-attention policy '{kv_cross}': moot at beam 1 (one copy anyway)")
    return notes


def row_bytes(basis: ReportBasis, beams: int) -> tuple[int, str]:
    """One chunk's K/V at its largest (a full window's positions), `beams` copies of each:
    estimated."""
    dims, nbytes = basis.dims, basis.value_bytes
    self_bytes = estimate.self_attention_bytes(dims, dims.n_text_ctx, beams, nbytes)
    return self_bytes + estimate.cross_attention_bytes(dims, beams, nbytes), ESTIMATED


class WholeLoadWatch:
    """Watches a decode for the every-thread engine's load on demand (`on_demand`:
    backends/ctranslate2/replicas.py OnDemand, None where there is none), from its making to
    `note`, which says so in a report's stats: a second load of the model, for a call no
    replica takes."""

    def __init__(self, on_demand) -> None:
        self._on_demand = on_demand
        self._started_before = on_demand is None or on_demand.started

    def note(self, report: DecoderReport) -> None:
        on_demand = self._on_demand
        if self._started_before or not on_demand.started:
            return
        took = f"{on_demand.seconds:.2f} s" if on_demand.seconds is not None else "still loading"
        threads = report.settings.get(row.ENGINE_THREADS)
        note = f"{WHOLE_LOAD_NOTE}, for a call no replica takes ({took})"
        report.settings[row.ENGINE_THREADS] = f"{threads}; {note}" if threads else note
