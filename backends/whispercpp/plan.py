"""How one request runs on whisper-cli: the Plan (flags that depend on the request, the
settings in force, what could not be honoured) and the argv of one whisper-cli run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kvscribe.backends.whispercpp import kvtypes
from kvscribe.backends.whispercpp.flags import Flags
from kvscribe.backends.whispercpp.words import DtwChoice
from kvscribe.chunking import MAX_SECONDS
from kvscribe.contract import DecodeRequest


@dataclass
class Plan:
    """How one request runs: the flags that depend on it, and for the report the settings
    in force and what could not be honoured."""

    beams: int
    max_context: int
    flash_attn: bool
    cache_types: kvtypes.CacheTypes
    fallback: Flags
    dtw: DtwChoice | None = None  # None: no word timestamps asked for
    use_gpu: bool = False  # False: -ng, the CPU even where whisper-cli was built with a GPU
    settings: dict[str, str] = field(default_factory=dict)
    not_applicable: list[str] = field(default_factory=list)

    @property
    def words(self) -> bool:
        return self.dtw is not None

    @property
    def conditions(self) -> bool:
        """Windows are decoded after the text before them (-mc not 0)."""
        return self.max_context != 0


@dataclass(frozen=True)
class Run:
    """What differs between the whisper-cli runs of one request (the pieces of an input)."""

    wav: Path
    out: Path
    threads: int
    processors: int = 1
    language: str = "en"  # "auto": whisper.cpp detects it
    prompt: str | None = None


def argv(
    base: list[str], plan: Plan, run: Run, request: DecodeRequest, kv_types: bool
) -> list[str]:
    """`base` (the binary and its model) plus the flags of one run."""
    args = [*base, "-f", str(run.wav), "-of", str(run.out), "-ojf", "-t", str(run.threads)]
    if run.processors > 1:
        args += ["-p", str(run.processors)]
    args += ["-bs", str(plan.beams), *plan.fallback.argv, "-mc", str(plan.max_context)]
    args += ["-fa" if plan.flash_attn else "-nfa"]
    if kv_types:
        args += ["-kvs", plan.cache_types.self_type, "-kvc", plan.cache_types.cross_type]
    if plan.dtw is not None and plan.dtw.preset is not None:
        args += ["-dtw", plan.dtw.preset]
    if not plan.use_gpu:
        args += ["-ng"]
    args += ["-l", run.language]
    if request.task == "translate":
        args.append("-tr")
    if run.prompt:
        args += ["--prompt", run.prompt]
    return args


def no_speech_notes(
    request: DecodeRequest, multilingual: bool, max_context: int, seconds: float, fixed: bool
) -> list[str]:
    """whisper.cpp 1.8.5 reads the no-speech probability from the first row of the
    prompt's logits but computes only the last row: right only when the prompt is the
    start token alone (English-only model, no previous text and no --prompt). kvscribe's
    own build carries the fix (`fixed`: no-speech-logits-row.patch, ggml-org/whisper.cpp#3945);
    a whisper-cli found elsewhere may not."""
    if fixed or request.fallback.no_speech_threshold is None:
        return []
    after_text = max_context != 0 and seconds > MAX_SECONDS
    if not multilingual and not after_text and not request.prompt:
        return []
    where = (
        "on this multilingual model"
        if multilingual
        else "in windows decoded after previous text or a prompt"
    )
    return [
        "no-speech test: whisper.cpp 1.8.5 reads the no-speech probability from a logits "
        f"row it does not compute {where}, so silence there is not skipped "
        "(--vad-filter removes it before decoding)"
    ]


def describe_processors(processors: int, threads: int, batch: int) -> str:
    text = f"{processors} x {threads} threads"
    if processors > 1:
        text += " (the audio cut into equal parts at fixed points, one whisper state each)"
    if batch > processors:
        text += f"; batch size {batch}: at most one part per thread and per 30 s of audio"
    return text
