"""Everything one `kvscribe` run was asked to do, validated once, then frozen."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any

from kvscribe.controls import CONTROLS, Control, in_range
from kvscribe.decoding import Fallback, VadFilter, temperatures_from
from kvscribe.errors import UsageError
from kvscribe.languages import language_code, refuse_unknown
from kvscribe.live.streaming import StreamSettings
from kvscribe.option_values import (
    check_count,
    check_decoding,
    check_kv,
    check_threads,
    parse_clips,
)
from kvscribe.voice.silero import VadSettings
from kvscribe.writers import WriterOptions

DEVICES = ("auto", "cpu", "cuda", "mps")
# The formats the word-layout flags lay out (kvscribe.writers): the rest would ignore them.
SUBTITLES = ("srt", "vtt")
LAID_OUT_BY = {"--word-level-tsv": ("tsv",)}

# Field metadata: a different value can change what an output file contains, so a batch
# redoes its inputs when the value changes (kvscribe.batch derives its resume key from it).
SHAPES_OUTPUT = "shapes_output"
# An option added after manifests existed joins the key only when set away from its default,
# so earlier runs' manifests still resume.
KEYED_WHEN_SET = "keyed_when_set"


def _shaping(default: Any) -> Any:
    return field(default=default, metadata={SHAPES_OUTPUT: True})


def _shaping_added(default: Any) -> Any:
    return field(default=default, metadata={SHAPES_OUTPUT: True, KEYED_WHEN_SET: True})


def _control_field(control: Control) -> tuple[str, Any, Any]:
    kind = control.kind if control.default is not None else control.kind | None
    return control.name, kind, _shaping_added(control.default)


# The decoding controls' values, one field each, named as kvscribe.controls declares them:
# optional decoding options (faster-whisper's / openai-whisper's names) that a backend
# unable to honour one reports "not applicable".
ControlValues = make_dataclass(
    "ControlValues", [_control_field(c) for c in CONTROLS], frozen=True, kw_only=True
)


@dataclass(frozen=True, kw_only=True)
class EngineOptions(ControlValues):  # type: ignore[misc,valid-type]
    """What `transcribe` and `mic` share: the engine, the decoding and the report.
    Their flags are declared once, in kvscribe.cli.shared_options (the decoding controls'
    in kvscribe.controls)."""

    backend: str = _shaping("ctranslate2")
    profile: str = _shaping("auto")
    model: str | None = _shaping(None)
    language: str | None = _shaping(None)
    task: str = _shaping("transcribe")
    beam_size: int | None = _shaping(None)
    device: str | None = _shaping(None)
    kv_policy: str | None = _shaping(None)  # overrides the profile's self-attention policy
    kv_cross: str | None = _shaping(None)  # overrides the profile's cross-attention policy
    threads: int | None = None  # overrides the backend section's thread count
    # Temperature fallback and the no-speech test, as openai-whisper names and defaults them.
    temperature: float = _shaping_added(0.0)
    temperature_increment_on_fallback: float = _shaping_added(0.2)  # 0: no fallback
    best_of: int = _shaping_added(5)
    compression_ratio_threshold: float = _shaping_added(2.4)
    logprob_threshold: float = _shaping_added(-1.0)
    no_speech_threshold: float = _shaping_added(0.6)
    stats_json: Path | None = None
    quiet: bool = False

    def fallback(self) -> Fallback:
        return Fallback(
            temperatures=temperatures_from(
                self.temperature, self.temperature_increment_on_fallback
            ),
            compression_ratio_threshold=self.compression_ratio_threshold,
            logprob_threshold=self.logprob_threshold,
            no_speech_threshold=self.no_speech_threshold,
            best_of=self.best_of,
        )

    def request_fields(self) -> dict[str, Any]:
        """What every decode of the run is asked (kvscribe.runner.decode_request); each
        command adds its own."""
        return {
            "language": self.language,
            "task": self.task,
            "beam_size": self.beam_size,
            "fallback": self.fallback(),
            **{c.name: c.to_request(getattr(self, c.name)) for c in CONTROLS},
        }

    def _check_engine(self) -> None:
        """Settle the language's spelling, then validate what picks and drives the engine."""
        # openai-whisper's names (English) and any case are held as the code (en) itself,
        # so a batch's resume key and every backend see one spelling.
        object.__setattr__(self, "language", language_code(self.language))
        refuse_unknown(self.language)  # here, before any engine's imports
        check_decoding(self.task, self.beam_size)
        if self.device is not None and self.device not in DEVICES:
            raise UsageError(
                f"must be one of {', '.join(DEVICES)}",
                subject="--device",
                hint=f"got {self.device!r}",
            )
        check_kv(self.kv_policy, self.kv_cross)
        check_threads(self.threads)
        self._check_fallback()
        self._check_controls()

    def _check_controls(self) -> None:
        for control in CONTROLS:
            control.validate(getattr(self, control.name))

    def _check_fallback(self) -> None:
        in_range("--temperature", self.temperature, 0.0, 1.0)
        in_range(
            "--temperature-increment-on-fallback", self.temperature_increment_on_fallback, 0.0, 1.0
        )
        in_range("--compression-ratio-threshold", self.compression_ratio_threshold, 1.0, 100.0)
        in_range("--logprob-threshold", self.logprob_threshold, -100.0, 0.0)
        in_range("--no-speech-threshold", self.no_speech_threshold, 0.0, 1.0)
        if not 1 <= self.best_of <= 16:
            raise UsageError(
                "must be between 1 and 16", subject="--best-of", hint=f"got {self.best_of}"
            )


def output_shaping_fields(options: EngineOptions | type[EngineOptions]) -> tuple[str, ...]:
    """Names of the options that can change what an output contains."""
    return tuple(f.name for f in fields(options) if f.metadata.get(SHAPES_OUTPUT))


def output_shaping_values(options: EngineOptions) -> dict[str, Any]:
    """The output-shaping options and their values, as a batch's resume key records them."""
    return {
        f.name: getattr(options, f.name)
        for f in fields(options)
        if f.metadata.get(SHAPES_OUTPUT)
        and not (f.metadata.get(KEYED_WHEN_SET) and getattr(options, f.name) == f.default)
    }


@dataclass(frozen=True)
class TranscribeOptions(EngineOptions):
    inputs: tuple[Path, ...]
    formats: tuple[str, ...] = ()  # empty: the timestamped transcript on stdout
    output_dir: Path | None = None
    # Speech chunks decoded at once; None: the profile's.
    batch_size: int | None = _shaping(None)
    compute_type: str | None = _shaping(None)  # overrides the backend section's compute_type
    # Decoding, as openai-whisper / faster-whisper name and default it.
    initial_prompt: str | None = _shaping_added(None)
    condition_on_previous_text: bool | None = _shaping_added(None)  # None: the profile's
    word_timestamps: bool = _shaping_added(False)
    # Silence cut out before decoding (faster-whisper's vad_filter), in seconds.
    vad_filter: bool = _shaping_added(False)
    vad_threshold: float = _shaping_added(0.5)
    vad_min_speech: float = _shaping_added(0.0)
    vad_min_silence: float = _shaping_added(2.0)
    vad_pad: float = _shaping_added(0.4)
    # openai-whisper's --clip-timestamps: only these spans (s) are decoded.
    clip_timestamps: str | None = _shaping_added(None)
    # Subtitles from word times (need word_timestamps).
    highlight_words: bool = _shaping_added(False)
    max_line_width: int | None = _shaping_added(None)
    max_line_count: int | None = _shaping_added(None)
    max_words_per_line: int | None = _shaping_added(None)
    word_level_tsv: bool = _shaping_added(False)  # tsv: a row per word
    # Audio on stdin ("-") or one pipe: named `output_name` in outputs; raw PCM needs
    # `input_format`.
    output_name: str | None = None
    input_format: str | None = None
    # Finding inputs in folders.
    recursive: bool = False
    globs: tuple[str, ...] = ()
    # Batch runs into --output-dir (resumable through the folder's manifest).
    jobs: int = 1
    force: bool = False
    fail_fast: bool = False
    json_events: bool = False

    def __post_init__(self) -> None:
        if not self.inputs:
            raise UsageError(
                "no input files given",
                subject="FILE",
                hint="pass one or more audio files or folders",
            )
        self._check_engine()
        self._check_vad()
        self._check_words()
        self._check_stdin()
        self.clips()
        self._check_vad_settings()
        if self.hallucination_silence_threshold is not None and not self.word_timestamps:
            raise UsageError(
                "skips silences found from word times",
                subject="--hallucination-silence-threshold",
                hint="add --word-timestamps",
            )
        check_count("batch_size", self.batch_size)
        if self.jobs < 1:
            raise UsageError("must be at least 1", subject="--jobs", hint=f"got {self.jobs}")
        batch_only = {
            "--jobs": self.jobs > 1,
            "--json": self.json_events,
            "--force": self.force,
            "--fail-fast": self.fail_fast,
        }
        for flag, used in batch_only.items():
            if used and self.output_dir is None:
                raise UsageError(
                    "only applies to runs that write into a folder",
                    subject=flag,
                    hint="add --output-dir DIR",
                )
        if self.output_dir is None and len(self.formats) > 1:
            raise UsageError(
                "several formats need a folder to write them to",
                subject="--output-format",
                hint="add --output-dir DIR",
            )

    def request_fields(self) -> dict[str, Any]:
        return super().request_fields() | {
            "batch_size": self.batch_size,
            "prompt": self.initial_prompt,
            "word_timestamps": self.word_timestamps,
            "condition_on_previous_text": self.condition_on_previous_text,
            "vad": self.vad(),
            "clips": self.clips(),
        }

    def clips(self) -> tuple[tuple[float, float | None], ...]:
        """`--clip-timestamps "0,10,30"` -> ((0, 10), (30, None)): spans in seconds, in
        order; an end left off runs to the end of the file (openai-whisper's reading)."""
        if self.clip_timestamps is None:
            return ()
        return parse_clips(self.clip_timestamps)

    def _check_vad_settings(self) -> None:
        """The VAD's settings tune --vad-filter; without it they would change nothing."""
        if self.vad_filter:
            return
        for name in ("vad_threshold", "vad_min_speech", "vad_min_silence", "vad_pad"):
            if getattr(self, name) != type(self).__dataclass_fields__[name].default:
                raise UsageError(
                    "tunes --vad-filter, which is off",
                    subject="--" + name.replace("_", "-"),
                    hint="add --vad-filter",
                )

    def vad(self) -> VadFilter | None:
        if not self.vad_filter:
            return None
        return VadFilter(
            threshold=self.vad_threshold,
            min_speech_seconds=self.vad_min_speech,
            min_silence_seconds=self.vad_min_silence,
            pad_seconds=self.vad_pad,
        )

    def writer_options(self) -> WriterOptions:
        return WriterOptions(
            highlight_words=self.highlight_words,
            max_line_width=self.max_line_width,
            max_line_count=self.max_line_count,
            max_words_per_line=self.max_words_per_line,
            word_level_tsv=self.word_level_tsv,
        )

    @property
    def reads_stdin(self) -> bool:
        return any(str(path) == STDIN for path in self.inputs)

    def _check_vad(self) -> None:
        in_range("--vad-threshold", self.vad_threshold, 0.05, 0.95)
        in_range("--vad-min-speech", self.vad_min_speech, 0.0, 10.0)
        in_range("--vad-min-silence", self.vad_min_silence, 0.05, 60.0)
        in_range("--vad-pad", self.vad_pad, 0.0, 5.0)

    def _check_words(self) -> None:
        for flag, value in (
            ("--max-line-width", self.max_line_width),
            ("--max-line-count", self.max_line_count),
            ("--max-words-per-line", self.max_words_per_line),
        ):
            if value is not None and value < 1:
                raise UsageError("must be at least 1", subject=flag, hint=f"got {value}")
        layout = {
            "--highlight-words": self.highlight_words,
            "--max-line-width": self.max_line_width is not None,
            "--max-line-count": self.max_line_count is not None,
            "--max-words-per-line": self.max_words_per_line is not None,
            "--word-level-tsv": self.word_level_tsv,
        }
        for flag, used in layout.items():
            if used and not self.word_timestamps:
                raise UsageError(
                    "lays out subtitles by word times",
                    subject=flag,
                    hint="add --word-timestamps",
                )
        if self.max_line_count is not None and self.max_line_width is None:
            raise UsageError(
                "counts lines that --max-line-width breaks",
                subject="--max-line-count",
                hint="add --max-line-width N",
            )
        for flag, used in layout.items():
            kinds = LAID_OUT_BY.get(flag, SUBTITLES)
            if used and not set(kinds) & set(self.formats):
                chosen = "-f " + ",".join(self.formats) if self.formats else "the console's lines"
                raise UsageError(
                    f"applies to {' and '.join(kinds)} only, not to {chosen}",
                    subject=flag,
                    hint=f"add -f {kinds[0]}, or leave {flag} out",
                )

    def _check_stdin(self) -> None:
        from kvscribe.audio.stdin import check_read_once

        check_read_once([str(path) for path in self.inputs], self.output_name, self.input_format)


STDIN = "-"


def _is_pipe(path: str | Path) -> bool:
    from kvscribe.audio.stdin import is_pipe

    return is_pipe(path)


@dataclass(frozen=True)
class LiveOptions(EngineOptions):
    """`kvscribe mic`: where audio comes from, the engine, and the streaming policy."""

    source: str | None = None  # None: a microphone; "-": raw PCM on stdin; else a file
    paced: bool = True  # replay a file at the speed it was spoken
    mic: str | None = None
    output: Path | None = None
    prompt: str | None = None
    # The streaming policy's defaults are the session's own (kvscribe/live/streaming.py),
    # but for the end of an utterance: a speaker pauses longer than a file's regions do.
    step: float = StreamSettings.step
    min_silence: float = 0.7
    commit_silence: float = StreamSettings.commit_silence
    context: float = StreamSettings.context
    hold_unsure: float = StreamSettings.hold_unsure
    vad_threshold: float = VadSettings.threshold
    # Seconds, at least, of the encoder window a buffer is decoded in; None (or 30):
    # Whisper's whole window.
    encoder_window: float | None = None

    def request_fields(self) -> dict[str, Any]:
        # Word times place commits and buffer cuts at the words' real ends.
        return super().request_fields() | {
            "prompt": self.prompt,
            "word_timestamps": True,
            "encoder_window": self.encoder_window if (self.encoder_window or 30) < 30 else None,
        }

    def __post_init__(self) -> None:
        in_range("--step", self.step, 0.2, 10.0)
        in_range("--min-silence", self.min_silence, 0.1, 5.0)
        in_range("--commit-silence", self.commit_silence, 0.1, 5.0)
        in_range("--context", self.context, 0.0, 20.0)
        in_range("--hold-unsure", self.hold_unsure, 0.0, 10.0)
        in_range("--vad-threshold", self.vad_threshold, 0.05, 0.95)
        if self.encoder_window is not None:
            in_range("--encoder-window", self.encoder_window, 1.0, 30.0)
        if not self.paced and (self.source in (None, "-") or _is_pipe(self.source)):
            raise UsageError(
                "only applies to replaying a file",
                subject="--as-fast-as-possible",
                hint="add --input FILE (a microphone or a pipe sets its own pace)",
            )
        if self.mic is not None and self.source is not None:
            raise UsageError(
                "picks a microphone, but --input replaces the microphone",
                subject="--mic",
                hint="use one of --mic and --input",
            )
        self._check_engine()
