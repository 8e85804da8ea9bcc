"""The contract every backend honours, built-in or plugin.

A backend is a class registered under the `kvscribe.backends` entry-point
group. Importing its module must be cheap: engines are imported in `load()`.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kvscribe.audio_stream import Samples
from kvscribe.decoding import Fallback, VadFilter
from kvscribe.errors import UsageError
from kvscribe.models import ModelRef
from kvscribe.profile import Profile
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
    # the cut (backends/ct2_batched.py), so the runner's digital-silence cut would only
    # hide those pauses from the segment rules.
    batched_cuts_pauses: bool = False
    # Decodes several short inputs side by side in the batches a long file's chunks use
    # (`Backend.transcribe_together`): a batch folder of short files fills the batch too.
    shares_batches: bool = False
    # A folder run without --jobs on a CPU starts one single-threaded worker per core
    # (kvscribe.capacity.default_jobs); False: one worker with every core, for an engine
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
    # The runner cuts them out and maps times back (kvscribe.vadfilter); never a backend.
    clips: tuple[tuple[float, float | None], ...] = ()
    # Optional decoding controls (OPTIONAL_FIELDS), as faster-whisper names them; a backend
    # honours those its Capabilities.honours lists, and the runner reports the rest.
    hotwords: str | None = None  # words to favour, given as prompt text before the window
    max_new_tokens: int | None = None  # at most this many tokens per window (None: 224)
    # Token ids never sampled; -1 stands for the model's own list (the default).
    suppress_tokens: tuple[int, ...] = (-1,)
    # With word times: skip a silence longer than this around a likely hallucination.
    hallucination_silence_threshold: float | None = None
    # Audio of one window encoded in a window of its length + 2 s, at least this many
    # seconds, not Whisper's whole 30 s (live mode, kvscribe.mel.encoder_frames).
    encoder_window: float | None = None


# The DecodeRequest fields a backend may not honour, and the flag that sets each.
OPTIONAL_FIELDS = {
    "hotwords": "--hotwords",
    "max_new_tokens": "--max-new-tokens",
    "suppress_tokens": "--suppress-tokens",
    "hallucination_silence_threshold": "--hallucination-silence-threshold",
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


def shared_by_language(
    audios: Sequence[Samples],
    request: DecodeRequest,
    language_of: Callable[[Samples, list, DecodeRequest], tuple[str, float | None]],
    decode: Callable[[str, list[list]], list[tuple[list[Segment], DecoderReport]]],
) -> list[Transcription]:
    """transcribe_together's frame, for every engine: each input's speech chunks (`source`:
    its number) and language (`language_of(audio, chunks, request)`); then, language by
    language, `decode(language, runs)` decodes those inputs' runs of chunks side by side
    and gives each its (segments, report)."""
    from dataclasses import replace

    from kvscribe.chunking import batched_rules, speech_chunks

    rules = batched_rules(request.vad)
    chunked = [
        [replace(chunk, source=number) for chunk in speech_chunks(audio, rules)]
        for number, audio in enumerate(audios)
    ]
    languages = [
        language_of(audio, chunks, request) for audio, chunks in zip(audios, chunked, strict=True)
    ]
    runs: dict[int, Transcription] = {}
    for language in dict.fromkeys(language for language, _ in languages):
        members = [n for n, (lang, _) in enumerate(languages) if lang == language]
        decoded = decode(language, [chunked[n] for n in members])
        for number, (segments, report) in zip(members, decoded, strict=True):
            probability = languages[number][1]
            runs[number] = Transcription(language, probability, iter(segments), report)
    return [runs[number] for number in range(len(audios))]


class Backend(abc.ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    requires: ClassVar[tuple[str, ...]] = ()  # engine modules, imported to check availability
    settings_schema: ClassVar[dict[str, type]] = {}  # its profile section's keys and types
    install_hint: ClassVar[str] = ""

    def __init__(self, model: ModelRef, profile: Profile, device: str):
        self.model = model
        self.profile = profile
        self.device = device

    @classmethod
    def check_available(cls) -> str | None:
        """None when this backend can run here, else why not and the fix, in one line."""
        for module in cls.requires:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                return f"{exc.name or module} is not installed: {cls.install_hint}"
        return None

    @abc.abstractmethod
    def load(self) -> None:
        """Load the model; raise BackendUnavailableError or ModelNotFoundError."""

    @abc.abstractmethod
    def transcribe(self, audio: Samples, request: DecodeRequest) -> Transcription:
        """Start decoding `audio` (mono 16 kHz float32); segments stream lazily.

        `audio` is a numpy array (live mode, tests) or, for files when the backend's
        capabilities say `streams_audio`, a StreamedAudio (or a Joined part of one): read
        it in slices (`audio[a:b]`, `audio.size`), never whole, so memory stays flat in the
        file's length (kvscribe.audio_stream)."""

    def transcribe_together(
        self, audios: Sequence[Samples], request: DecodeRequest
    ) -> list[Transcription]:
        """With `capabilities.shares_batches`: each of `audios` (inputs of at most 30 s)
        transcribed, their speech decoded side by side in shared batches, in order. The
        decoding is done when this returns (a batch mixes inputs), so an engine failure
        raises here and names no input: the batch worker then decodes them one at a time."""
        raise NotImplementedError(f"the {self.name} backend does not share batches")

    def shares_batches(self, request: DecodeRequest) -> bool:
        """Whether short inputs decoded with `request` may share batches: the engine can, and
        the request batches long files (`--batch-size 1` decodes every input alone)."""
        from kvscribe.chunking import MAX_SECONDS

        batched = self.batch_size_for(request, 2 * MAX_SECONDS) > 1
        return self.capabilities.shares_batches and batched and not request.clips

    @classmethod
    def devices_here(cls) -> str:
        """The devices it can use, as `kvscribe backends` lists them (an engine that knows
        what this machine offers may say more)."""
        return ", ".join(cls.capabilities.devices)

    @classmethod
    def threads_setting(cls) -> str | None:
        """The key of its profile section that sets the engine's CPU threads (--threads)."""
        return next((k for k in ("threads", "cpu_threads") if k in cls.settings_schema), None)

    def describe_settings(self) -> dict[str, str]:
        """The engine settings in force after load(), for the stats report."""
        return {}

    def profile_settings(self, schema: dict[str, type]) -> dict[str, Any]:
        """This backend's section of the profile, checked against `schema` (key -> type)."""
        section = dict(self.profile.settings_for(self.name))
        for key, value in section.items():
            expected = schema.get(key)
            if expected is None or not isinstance(value, expected):
                raise UsageError(
                    f"bad setting [{self.name}] {key} = {value!r}",
                    subject=self.profile.source,
                    hint="allowed: " + ", ".join(f"{k} ({t.__name__})" for k, t in schema.items()),
                )
        return section

    def honours(self, request: DecodeRequest, batched: bool) -> frozenset[str]:
        """The optional request fields this backend honours on the path that decodes
        `request` (batched: speech chunks decoded together)."""
        return self.capabilities.honours

    def unhonoured(self, request: DecodeRequest, seconds: float) -> list[str]:
        """ "not applicable" rows for what `request` asks that decoding `seconds` of audio
        here will not do (the runner and live mode add them to the report)."""
        batched = self.batch_size_for(request, seconds) > 1
        return not_honoured(request, self.honours(request, batched), self.name)

    def batch_size_for(self, request: DecodeRequest, seconds: float) -> int:
        """Chunks to decode at once for `seconds` of audio: the request's, else the profile's
        `batch_size`; audio that fits one window has nothing to batch."""
        from kvscribe.chunking import MAX_SECONDS

        wanted = request.batch_size
        if wanted is None:
            wanted = int(self.profile.settings_for(self.name).get("batch_size", 1))
        return wanted if seconds > MAX_SECONDS else 1

    def check_language(self, request: DecodeRequest, multilingual: bool, known: list[str]) -> None:
        """English-only models take no other language and cannot translate; codes must exist."""
        if not multilingual:
            if request.language not in (None, "en"):
                raise UsageError(
                    f"model {self.model.name} is English-only",
                    subject="--language",
                    hint="use --language en, or a multilingual model (--model base)",
                )
            if request.task == "translate":
                raise UsageError(
                    f"model {self.model.name} is English-only and cannot translate",
                    subject="--task",
                    hint="use a multilingual model (--model base)",
                )
        if request.language is not None and request.language not in known:
            raise UsageError(
                f"unknown language code {request.language!r}",
                subject="--language",
                hint=f"use a code such as {', '.join(known[:8])}, ..., a name such as "
                "English, or omit it",
            )
