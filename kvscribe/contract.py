"""The contract between the pipeline and every engine, at the ground floor: what a run asks
of a backend (DecodeRequest), what a backend can do (Capabilities), what it gives back
(Transcription, DecoderReport). Every layer reads these; `kvscribe.backends.base` holds
the `Backend` class and re-exports them for plug-ins written against it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvscribe.controls import CONTROLS
from kvscribe.decoding import Fallback, VadFilter
from kvscribe.provenance import ESTIMATED, make_provenance
from kvscribe.types import Segment

TASKS = ("transcribe", "translate")


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do; the CLI and profiles read these, never guess."""

    model_formats: tuple[str, ...]
    devices: tuple[str, ...]
    kv_controls: tuple[str, ...]  # which parts of a cache policy the engine can express
    # Honours DecodeRequest.batch_size on audio over 30 s (speech chunks decoded together,
    # or whisper-cli's parts decoded side by side).
    batched: bool = False
    # Filters silence out itself for DecodeRequest.vad (faster-whisper's vad_filter); for
    # backends without, the runner cuts the audio with kvscribe's VAD and maps times back.
    vad_filter: bool = False
    # Reads a file's audio in slices (a StreamedAudio), so memory stays flat in its length;
    # a backend without this (a plugin written for arrays) gets the whole file as an array.
    streams_audio: bool = False
    # Its batched path cuts every pause out of its chunks itself and times words through
    # the cut (backends/ctranslate2/batched.py), so the runner's digital-silence cut would only
    # hide those pauses from the segment rules.
    batched_cuts_pauses: bool = False
    # Decodes several short inputs side by side in the batches a long file's chunks use
    # (`Backend.transcribe_together`): a batch folder of short files fills the batch too.
    shares_batches: bool = False
    # Its batched path prompts a file's chunks with the text decoded before them, dealt in
    # lanes (kvscribe.chunk_rounds); without, batched chunks decode unprompted.
    batched_prompts: bool = False
    # A row's tokens do not depend on the other rows of its batch, so `kvscribe serve` may
    # put different requests' inputs in one batch (tests/test_serve.py checks each engine).
    rows_independent: bool = True
    # A folder run without --jobs on a CPU starts one single-threaded worker per core
    # (kvscribe.machine.capacity.default_jobs); False: one worker with every core, for an engine
    # whose batches use the threads better than more processes do.
    worker_per_core: bool = True
    # The optional DecodeRequest fields (OPTIONAL_FIELDS) the engine honours on every path;
    # `Backend.honours` narrows it per path. A field a request sets that its path does not
    # honour is reported "not applicable" by the runner, worded once (not_honoured).
    honours: frozenset[str] = frozenset()


@dataclass(frozen=True)
class DecodeRequest:
    """Per-input decoding choices from the command line (None: the profile decides)."""

    language: str | None = None
    task: str = "transcribe"
    beam_size: int | None = None
    # Text that came before this audio: --initial-prompt, or live mode's committed text.
    prompt: str | None = None
    # Chunks decoded at once (kvscribe.chunking): 1 = the sequential, previous-text-conditioned
    # path; None = the profile's `batch_size` (backends without a batch path ignore it).
    batch_size: int | None = None
    word_timestamps: bool = False  # fill Segment.words
    condition_on_previous_text: bool | None = None  # None: the profile's setting
    fallback: Fallback = field(default_factory=Fallback)
    vad: VadFilter | None = None  # only reaches backends whose capabilities say vad_filter
    # --clip-timestamps: the only spans decoded, (start s, end s or None: the file's end).
    # The runner cuts them out and maps times back (kvscribe.pipeline); never a backend.
    clips: tuple[tuple[float, float | None], ...] = ()
    # Optional decoding controls (OPTIONAL_FIELDS), as faster-whisper names them; a backend
    # honours those its Capabilities.honours lists, and the runner reports the rest.
    hotwords: str | None = None  # words to favour, given as prompt text before the window
    max_new_tokens: int | None = None  # at most this many tokens per window (None: 224)
    # Token ids never sampled; -1 stands for the model's own list (the default).
    suppress_tokens: tuple[int, ...] = (-1,)
    # With word times: skip a silence longer than this around a likely hallucination.
    hallucination_silence_threshold: float | None = None
    # Above 1: the tokens already decoded in a window score lower (faster-whisper's).
    repetition_penalty: float = 1.0
    # Audio of one window encoded in a window of its length + 2 s, at least this many
    # seconds, not Whisper's whole 30 s (live mode, kvscribe.audio.mel.encoder_frames).
    encoder_window: float | None = None
    # Sequential decodes over one window: speech the decoder skipped (under a word aligned
    # over 2 s, or in a gap of 5 s before one) is decoded again
    # (backends/ctranslate2/stretched.py). Live mode turns it off
    # (kvscribe.live.streaming.decode_request): its next decode reads that speech anyway.
    reread_stretched: bool = True


# The DecodeRequest fields a request may leave to the profile (None), and the default where
# a backend's profile section does not set one either (Backend.completed fills them).
PROFILE_DEFAULTS = {"beam_size": 5, "batch_size": 1, "condition_on_previous_text": True}


def completed(request: DecodeRequest, section: Mapping[str, Any]) -> DecodeRequest:
    """`request` with every field it leaves to the profile (None) filled from a backend's
    profile `section`, else PROFILE_DEFAULTS: the one place a profile's decoding defaults
    reach a request (Backend.completed, and a batch's plan before any backend is loaded)."""
    filled = {
        name: section.get(name, default)
        for name, default in PROFILE_DEFAULTS.items()
        if getattr(request, name) is None
    }
    return dataclasses.replace(request, **filled) if filled else request


# The DecodeRequest fields a backend may not honour, and the flag that sets each.
OPTIONAL_FIELDS = {
    **{control.name: control.flag for control in CONTROLS},
    "encoder_window": "--encoder-window",
}


def not_honoured(request: DecodeRequest, honoured: frozenset[str], backend: str) -> list[str]:
    """ "not applicable" rows for the optional fields `request` sets away from their defaults
    that `honoured` does not hold."""
    defaults = DecodeRequest()
    return [
        f"{flag}: the {backend} backend cannot honour it here; decoded without it"
        for name, flag in OPTIONAL_FIELDS.items()
        if getattr(request, name) != getattr(defaults, name) and name not in honoured
    ]


@dataclass
class DecoderReport:
    """What the decoder held and did for one input. Bytes are per run peak."""

    tokens: int = 0
    windows: int = 0  # 30 s windows decoded (sequential) or speech chunks (batched)
    batch_size: int = 1  # chunks decoded at once; 1 = sequential
    kv_self_peak_bytes: int = 0
    kv_self_full_bytes: int = 0
    kv_cross_bytes: int = 0
    # Per KV figure ("self", "cross"): MEASURED, DERIVED or ESTIMATED (kvscribe.provenance).
    kv_provenance: dict[str, str] = field(default_factory=lambda: make_provenance(ESTIMATED))
    settings: dict[str, str] = field(default_factory=dict)
    not_applicable: list[str] = field(default_factory=list)
    # Measured by backends that run the decoder themselves (None: not measurable there).
    encoder_seconds: float | None = None
    first_token_seconds: float | None = None  # from transcribe() to the first decoded token
    step_seconds: list[float] = field(default_factory=list)  # one per decoded token
    recompute_macs: int = 0  # extra multiply-adds paid by half layers
    # Batched decoders: seconds of speech in stretches every read of them skipped
    # (kvscribe.rereads), whose words are missing from the text.
    unread_speech_seconds: float = 0.0
    unread_stretches: int = 0
    # (positions seen, self-attention bytes stored) per step of the longest window.
    kv_trace: list[tuple[int, int]] = field(default_factory=list)
    # Figures an engine reports about itself (whisper.cpp's stderr), and its child process.
    engine_memory_bytes: dict[str, int] = field(default_factory=dict)
    engine_kv_types: dict[str, str] = field(default_factory=dict)  # "kv self" -> "q8_0"
    # What F16 caches would hold where the engine's are another type (derived by kvscribe).
    engine_f16_bytes: dict[str, int] = field(default_factory=dict)
    engine_timings_ms: dict[str, float] = field(default_factory=dict)
    engine_runs: dict[str, int] = field(default_factory=dict)
    engine_peak_rss_bytes: int | None = None
    # Wall seconds by stage, where a backend times its own ("encoder", "decoder", ...):
    # summed over the calls, on the thread that ran the stage (replicas run inside it).
    stage_seconds: dict[str, float] = field(default_factory=dict)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage `name` (added to what that stage took before)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - start
            self.stage_seconds[name] = self.stage_seconds.get(name, 0.0) + elapsed

    def left_unread(self, part) -> None:
        """Count a stretch of speech (a kvscribe.chunking.Chunk) no read of it transcribed."""
        self.unread_speech_seconds += part.speech_seconds
        self.unread_stretches += 1

    @property
    def kv_estimated(self) -> bool:
        """Any KV figure only estimated (the flag --stats-json has always carried)."""
        return ESTIMATED in self.kv_provenance.values()


@dataclass
class Transcription:
    """One input being decoded: iterate `segments`; `report` is complete once they are exhausted."""

    language: str
    language_probability: float | None
    segments: Iterator[Segment]
    report: DecoderReport
