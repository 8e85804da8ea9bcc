"""The flags `kvscribe transcribe` and `kvscribe mic` share, each declared once here (the
decoding controls once in kvscribe.controls, turned into flags here).

A command's parameter table (cli.parameters) takes them in three groups, `**parameters(ENGINE)`,
`**parameters(DECODING)` and `**parameters(REPORT)` (`mic` passes `mic=True`), so a new shared
flag reaches both commands from its declaration. Defaults come from
kvscribe.options.EngineOptions, whose fields also say which options shape outputs and which
request each decode is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import typer

from kvscribe.cli.parameters import ParameterTable
from kvscribe.controls import CONTROLS, Control
from kvscribe.options import EngineOptions

Task = Literal["transcribe", "translate"]
Device = Literal["auto", "cpu", "cuda", "mps"]

_ENGINE_DEFAULTS = {f.name: f.default for f in fields(EngineOptions)}


@dataclass(frozen=True)
class SharedOption:
    name: str  # the commands' parameter, and the EngineOptions field it fills
    flags: tuple[str, ...]
    help: str
    settings: dict[str, Any] = field(default_factory=dict)  # more typer.Option arguments
    # Where `mic` has always differed (shorter help): kept so its --help reads as before.
    mic_differs: dict[str, Any] = field(default_factory=dict)
    default: Any = None  # only for a flag that fills no EngineOptions field (--debug)
    kind: Any = str  # the parameter's type, as typer reads it

    def option(self, mic: bool = False) -> Any:
        """A typer.Option for one command's parameter."""
        default = _ENGINE_DEFAULTS.get(self.name, self.default)
        arguments = {"help": self.help, **self.settings, **(self.mic_differs if mic else {})}
        return typer.Option(default, *self.flags, **arguments)

    @classmethod
    def of(cls, control: Control) -> SharedOption:
        """The flag of a decoding control (kvscribe.controls), in the decoding panel."""
        arguments: dict[str, Any] = {"rich_help_panel": DECODING_PANEL}
        if control.show_default is not None:
            arguments["show_default"] = control.show_default
        if control.metavar is not None:
            arguments["metavar"] = control.metavar
        return cls(
            control.name, (control.flag,), control.help, arguments, control.mic, kind=control.kind
        )


def _complete_profiles(incomplete: str) -> list[str]:
    from kvscribe import profile

    return [name for name in profile.available() if name.startswith(incomplete)]


def _complete_backends(incomplete: str) -> list[str]:
    from kvscribe import registry

    return [name for name in registry.names() if name.startswith(incomplete)]


BACKEND = SharedOption(
    "backend",
    ("--backend", "-b"),
    "Inference backend (`kvscribe backends`).",
    {"autocompletion": _complete_backends},
    mic_differs={"help": "Inference backend.", "autocompletion": None},
)
PROFILE = SharedOption(
    "profile",
    ("--profile", "-p"),
    "Hardware profile (`kvscribe profiles`).",
    {"autocompletion": _complete_profiles},
    mic_differs={"help": "Hardware profile.", "autocompletion": None},
)
MODEL = SharedOption(
    "model",
    ("--model", "-m"),
    "Model name or path (`kvscribe models`).",
    {"show_default": "tiny.en (embedded)"},
    mic_differs={"help": "Model name or path."},
)
LANGUAGE = SharedOption(
    "language",
    ("--language", "-l"),
    "Spoken language: a code or openai-whisper's name, e.g. en, de, English; detected "
    "when omitted.",
    {"show_default": "detect"},
    mic_differs={"help": "Spoken language code.", "show_default": "detected once"},
)
TASK = SharedOption("task", ("--task",), "Transcribe, or translate into English.", kind=Task)
BEAM_SIZE = SharedOption(
    "beam_size",
    ("--beam-size",),
    "Beam width (1 = greedy).",
    {"show_default": "profile's"},
    kind=int,
)
DEVICE = SharedOption(
    "device",
    ("--device",),
    "Run on this device.",
    {"show_default": "profile's"},
    mic_differs={"help": "Run the model on this device."},
    kind=Device,
)
KV_POLICY = SharedOption(
    "kv_policy",
    ("--kv-policy",),
    "Self-attention KV policy, e.g. 'sink=4,window=64,q8_0@layers>=2' "
    "(parts: full, half, window=N, sink=N, q8_0, q4_0, residual=N; clauses joined by ';').",
    {"show_default": "profile's"},
    mic_differs={"help": "Self-attention KV policy."},
)
KV_CROSS = SharedOption(
    "kv_cross",
    ("--kv-cross",),
    "Cross-attention KV policy: full, shared, shared,q8_0, shared,q4_0 "
    "(whisper.cpp always shares; q8_0/q4_0 need kvscribe's build).",
    {"show_default": "profile's"},
    mic_differs={"help": "Cross-attention KV policy."},
)
THREADS = SharedOption(
    "threads",
    ("--threads",),
    "CPU threads the engine uses.",
    {"show_default": "profile's"},
    kind=int,
)
STATS_JSON = SharedOption(
    "stats_json",
    ("--stats-json",),
    "Also write the stats report to this JSON file.",
    {"dir_okay": False},
    mic_differs={"help": "Also write the stats report to this file."},
    kind=Path,
)
QUIET = SharedOption(
    "quiet",
    ("--quiet", "-q"),
    "Only the transcript and errors: no progress or stats.",
    mic_differs={"help": "Committed lines only; no stats."},
    kind=bool,
)
DEBUG = SharedOption(
    "debug", ("--debug",), "Show tracebacks and debug logs.", default=False, kind=bool
)

DECODING_PANEL = "Decoding (openai-whisper's defaults)"
_DECODING = {"rich_help_panel": DECODING_PANEL}
TEMPERATURE = SharedOption(
    "temperature",
    ("--temperature",),
    "Sampling temperature of the first try.",
    _DECODING,
    kind=float,
)
TEMPERATURE_INCREMENT = SharedOption(
    "temperature_increment_on_fallback",
    ("--temperature-increment-on-fallback",),
    "Retry a failed window this much hotter, up to 1.0 (0: never retry).",
    _DECODING,
    kind=float,
)
BEST_OF = SharedOption(
    "best_of",
    ("--best-of",),
    "Samples drawn per retry above temperature 0.",
    _DECODING,
    kind=int,
)
COMPRESSION_RATIO_THRESHOLD = SharedOption(
    "compression_ratio_threshold",
    ("--compression-ratio-threshold",),
    "A window whose text compresses better than this (repetition) is retried.",
    _DECODING,
    kind=float,
)
LOGPROB_THRESHOLD = SharedOption(
    "logprob_threshold",
    ("--logprob-threshold",),
    "A window whose mean token log-probability is lower is retried.",
    _DECODING,
    kind=float,
)
NO_SPEECH_THRESHOLD = SharedOption(
    "no_speech_threshold",
    ("--no-speech-threshold",),
    "A window this likely to hold no speech (and below --logprob-threshold) is skipped.",
    _DECODING,
    kind=float,
)
# The shared flags in the three places a command's table puts them: what runs (first), how
# it decodes (the decoding panel, the controls last), and what it reports (last).
ENGINE = (BACKEND, PROFILE, MODEL, LANGUAGE, TASK, BEAM_SIZE, DEVICE, KV_POLICY, KV_CROSS, THREADS)
DECODING = (
    TEMPERATURE,
    TEMPERATURE_INCREMENT,
    BEST_OF,
    COMPRESSION_RATIO_THRESHOLD,
    LOGPROB_THRESHOLD,
    NO_SPEECH_THRESHOLD,
    *(SharedOption.of(control) for control in CONTROLS),
)
REPORT = (STATS_JSON, QUIET, DEBUG)
SHARED = (*ENGINE, *DECODING, *REPORT)


def parameters(group: tuple[SharedOption, ...], mic: bool = False) -> ParameterTable:
    """`group`'s entries of a command's parameter table (cli.parameters)."""
    return {option.name: (option.kind, option.option(mic)) for option in group}
