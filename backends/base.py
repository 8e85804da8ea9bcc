"""The contract every backend honours, built-in or plugin.

A backend is a class registered under the `kvscribe.backends` entry-point
group. Importing its module must be cheap: engines are imported in `load()`.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Sequence
from typing import Any, ClassVar

from kvscribe.audio.stream import Samples
from kvscribe.chunking import shared_by_language
from kvscribe.contract import (
    OPTIONAL_FIELDS,
    PROFILE_DEFAULTS,
    TASKS,
    Capabilities,
    DecodeRequest,
    DecoderReport,
    Transcription,
    completed,
    not_honoured,
)
from kvscribe.errors import UsageError
from kvscribe.languages import WHISPER_CODES, unknown_code
from kvscribe.models import ModelRef
from kvscribe.option_values import RANGES, out_of_range
from kvscribe.profile import Profile
from kvscribe.types import Segment

# The contract's types live in kvscribe.contract; plug-ins written against this module
# import them from here, and keep working.
__all__ = [
    "OPTIONAL_FIELDS",
    "PROFILE_DEFAULTS",
    "TASKS",
    "Backend",
    "Capabilities",
    "DecodeRequest",
    "DecoderReport",
    "Segment",
    "Transcription",
    "not_honoured",
    "shared_by_language",
]


class Backend(abc.ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    requires: ClassVar[tuple[str, ...]] = ()  # engine modules, imported to check availability
    settings_schema: ClassVar[dict[str, type]] = {}  # its profile section's keys and types
    # The values a string key of its section may take, checked with the types.
    setting_choices: ClassVar[dict[str, tuple[str, ...]]] = {}
    install_hint: ClassVar[str] = ""

    def __init__(self, model: ModelRef, profile: Profile, device: str):
        self.model = model
        self.profile = profile
        self.device = device

    def profile_conditions(self) -> bool:
        """Whether the profile prompts each window with the text before it."""
        return bool(self.completed(DecodeRequest()).condition_on_previous_text)

    def completed(self, request: DecodeRequest) -> DecodeRequest:
        """`request` with every field it leaves to the profile (None) filled from this
        backend's profile section (kvscribe.contract.completed), before any engine sees it."""
        return completed(request, self.profile.settings_for(self.name))

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

    def expect(self, request: DecodeRequest) -> None:
        """Decodes like `request` will follow (a file run's or a live session's one request):
        the engine may start loading now what they will need. Default: nothing."""
        del request  # an engine that loads everything in load() has nothing to start

    def transcribe(self, audio: Samples, request: DecodeRequest) -> Transcription:
        """Start decoding `audio` (mono 16 kHz float32); segments stream lazily.

        `audio` is a numpy array (live mode, tests) or, for files when the backend's
        capabilities say `streams_audio`, a StreamedAudio (or a Joined part of one): read
        it in slices (`audio[a:b]`, `audio.size`), never whole, so memory stays flat in the
        file's length (kvscribe.audio.stream). The engine's `decode` gets the request
        completed from the profile; a plug-in written before `decode` existed overrides
        this method instead, and keeps working."""
        return self.decode(audio, self.completed(request))

    def decode(self, audio: Samples, request: DecodeRequest) -> Transcription:
        """`transcribe` for an engine: `request` is complete (no field left to the profile)."""
        raise NotImplementedError(
            f"the {self.name} backend implements neither decode nor transcribe"
        )

    def transcribe_together(
        self, audios: Sequence[Samples], request: DecodeRequest
    ) -> list[Transcription]:
        """With `capabilities.shares_batches`: each of `audios` (inputs of at most 30 s)
        transcribed, their speech decoded side by side in shared batches, in order. The
        decoding is done when this returns (a batch mixes inputs), so an engine failure
        raises here and names no input: the batch worker then decodes them one at a time."""
        return self.decode_together(audios, self.completed(request))

    def decode_together(
        self, audios: Sequence[Samples], request: DecodeRequest
    ) -> list[Transcription]:
        """`transcribe_together` for an engine: `request` is complete."""
        raise NotImplementedError(f"the {self.name} backend does not share batches")

    def shares_batches(self, request: DecodeRequest) -> bool:
        """Whether short inputs decoded with `request` may share batches: the engine can, and
        the request batches long files (`--batch-size 1` decodes every input alone)."""
        from kvscribe.chunking import MAX_SECONDS

        batched = self.batch_size_for(request, 2 * MAX_SECONDS) > 1
        return self.capabilities.shares_batches and batched and not request.clips

    def kv_row_bytes(self, request: DecodeRequest) -> tuple[int, str] | None:
        """The KV storage one speech chunk (one batch row, with its beams) holds at its
        largest when decoded with `request`, and its provenance (kvscribe.provenance); None
        where the engine's memory is not kvscribe's to count (a server then admits work by
        its queue bounds alone). `kvscribe serve` reserves it per row it admits."""
        return None

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

    def bad_compute_type(self, wanted: str, allowed: Sequence[str]) -> UsageError:
        """The error for a compute type this backend cannot run, blaming where it came
        from: --compute-type, or the profile's section."""
        from_flag = self.profile.compute_type_from_command_line
        return UsageError(
            f"the {self.name} backend has no compute type {wanted!r}",
            subject="--compute-type" if from_flag else f"{self.profile.source} [{self.name}]",
            hint="use " + ", ".join(allowed),
        )

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
            problem = out_of_range(key, value) if key in RANGES else None
            choices = self.setting_choices.get(key)
            if choices is not None and value not in choices:
                problem = "one of " + ", ".join(choices)
            if problem is not None:  # as the command line's flag checks it
                raise UsageError(
                    f"bad setting [{self.name}] {key} = {value!r}",
                    subject=self.profile.source,
                    hint=problem,
                )
        return section

    def honours(self, request: DecodeRequest, batched: bool) -> frozenset[str]:
        """The optional request fields this backend honours on the path that decodes
        `request` (batched: speech chunks decoded together)."""
        return self.capabilities.honours

    def unhonoured(self, request: DecodeRequest, seconds: float) -> list[str]:
        """ "not applicable" rows for what `request` (as the command line gave it, before
        `completed`) asks that decoding `seconds` of audio here will not do (the runner and
        live mode add them to the report)."""
        batched = self.batch_size_for(request, seconds) > 1
        notes = not_honoured(request, self.honours(request, batched), self.name)
        prompts = self.capabilities.batched_prompts
        if batched and request.condition_on_previous_text and not prompts:  # asked for
            notes.append("previous-text prompt: batched chunks decode unprompted")
        return notes

    def batch_size_for(self, request: DecodeRequest, seconds: float) -> int:
        """Chunks to decode at once for `seconds` of audio: the request's, else the profile's
        `batch_size`; audio that fits one window has nothing to batch."""
        from kvscribe.chunking import MAX_SECONDS

        wanted = self.completed(request).batch_size
        return wanted if seconds > MAX_SECONDS else 1

    def check_language(self, request: DecodeRequest, multilingual: bool, known: list[str]) -> None:
        """Codes must exist (for an English-only model: be one of Whisper's); English-only
        models take no other language and cannot translate. The hints name the choices,
        not the command line's flags: the server words its errors from them too."""
        codes = known if multilingual else WHISPER_CODES
        if request.language is not None and request.language not in codes:
            raise unknown_code(request.language, known, english_only=not multilingual)
        if not multilingual:
            if request.language not in (None, "en"):
                raise UsageError(
                    f"model {self.model.name} is English-only",
                    subject="--language",
                    hint="ask for en, or run a multilingual model such as base (--model base)",
                )
            if request.task == "translate":
                raise UsageError(
                    f"model {self.model.name} is English-only and cannot translate",
                    subject="--task",
                    hint="run a multilingual model such as base (--model base)",
                )
