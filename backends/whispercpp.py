"""whisper.cpp backend: `whisper-cli` run as a child process on a ggml model.

whisper.cpp allocates its caches itself (the full text context) and shares one
cross-attention cache across beams. Of a cache policy it can express the beam
count, `-mc` (how many previous-text tokens are carried into the next window),
flash attention and, with kvscribe's patched build, the storage type of each cache:
a policy's q8_0 / q4_0 (self) and `--kv-cross ...,q8_0|q4_0` become `-kvs` / `-kvc`
(kvscribe/whispercpp/kvtypes.py); everything else is reported as not applicable.
`compute_type` q8_0 / q5_0 / q4_0 runs on weights quantized by whisper-quantize.
Memory and timings are whisper.cpp's own figures from its stderr; peak RSS is
the child's, from wait4.

Segments come from whisper-cli's full JSON (-ojf, written when it finishes, so transcribe()
runs it to the end): text token ids, mean token log-probability, the window (seek), and
with word timestamps words from whisper.cpp's DTW token times (kvscribe/whispercpp/words.py;
-dtw needs flash attention off, so a profile's quantized caches run F16 then). Fallback
thresholds, best-of and previous-text conditioning become -tp/-tpi/-nf, -et, -lpt, -nth,
-bo and -mc (kvscribe/whispercpp/flags.py, with what whisper.cpp does differently).

A batch size over 1 on audio over 30 s becomes whisper-cli's `-p N`: the audio cut into
N equal parts at fixed points, each decoded by its own whisper state in its own thread,
the threads shared out among them; at most one part per thread and per 30 s of audio.
Measured on 2 cores, tiny.en (benchmarks/results/whispercpp_processors.md): on the 182 s
clip `-p 2 -t 1` took 0.83x the time of `-p 1 -t 2` at beam 5 and greedy alike, WER
0.075 vs 0.081 (beam 5); pooled WER over the eval clips with -p 2 above 30 s 0.065 vs
0.070. The cost: peak RSS 484 vs 303 MB, since each part holds its own KV caches and
buffers (the KV figures are N times one state's); the cuts ignore pauses; and WER on
other audio went both ways (samples/jfk.wav 16 times: 0.040 vs 0.020 at beam 5, 0.028
vs 0.048 greedy). Off unless asked for: --batch-size, or [whispercpp] batch_size.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from kvscribe.backends.base import (
    Backend,
    Capabilities,
    DecodeRequest,
    DecoderReport,
    Transcription,
)

from kvscribe.chunking import MAX_SECONDS
from kvscribe.errors import BackendUnavailableError, UsageError
from kvscribe.models import ggml
from kvscribe.provenance import DERIVED, MEASURED, make_provenance
from kvscribe.types import Segment
from kvscribe.whispercpp import binary, fulljson, kvtypes, quantize
from kvscribe.whispercpp.flags import Flags, check_decoders, context_flags, fallback_flags
from kvscribe.whispercpp.languages import LANGUAGES
from kvscribe.whispercpp.process import (
    SAMPLE_RATE,
    Outcome,
    WhisperProcess,
    check_outcome,
    write_wav_f32,
)
from kvscribe.whispercpp.report import EngineFigures, parse_segment_line, parse_stderr
from kvscribe.whispercpp.segments import to_segments, without_annotations
from kvscribe.whispercpp.words import DtwChoice, dtw_preset

_SETTINGS = {
    "beam_size": int,
    "max_context": int,
    "flash_attn": bool,
    "threads": int,
    "batch_size": int,  # > 1: whisper-cli's -p on audio over 30 s (processors_for)
    "compute_type": str,  # weights: default (the file's) or q8_0 / q5_0 / q4_0 (quantize.py)
}
TIMEOUT_ENV = "KVSCRIBE_WHISPER_TIMEOUT"
_RETRIES = re.compile(r"fallbacks = *(\d+) p")  # whisper_print_timings: decodes redone
logger = logging.getLogger(__name__)


@dataclass
class _Plan:
    """How one request runs: the flags that depend on it, and for the report the settings
    in force and what could not be honoured."""

    beams: int
    max_context: int
    flash_attn: bool
    cache_types: kvtypes.CacheTypes
    fallback: Flags
    dtw: DtwChoice | None = None  # None: no word timestamps asked for
    settings: dict[str, str] = field(default_factory=dict)
    not_applicable: list[str] = field(default_factory=list)


class WhisperCppBackend(Backend):
    name = "whispercpp"
    summary = "whisper.cpp's whisper-cli as a subprocess (ggml f16, converted on first use)"
    capabilities = Capabilities(
        model_formats=("ggml",),
        devices=("cpu",),
        kv_controls=(
            "beam_size",
            "max_context (-mc)",
            "flash_attn (-fa/-nfa)",
            "self/cross cache type f16, q8_0, q4_0 (-kvs/-kvc, kvscribe's build)",
        ),
        batched=True,
    )
    settings_schema = _SETTINGS
    install_hint = binary.SETUP_HINT

    @classmethod
    def check_available(cls) -> str | None:
        try:
            binary.find()
        except BackendUnavailableError as exc:
            return exc.one_line()
        return None

    def load(self) -> None:
        self.settings = self.profile_settings(_SETTINGS)
        self.cli = binary.find()
        self.n_vocab = ggml.verify(self.model.path)
        self.vocab = fulljson.Vocabulary(self.n_vocab)
        self.multilingual = self.vocab.multilingual
        self.dims, file_type = ggml.read_dims(self.model.path)
        self.cache_types = self._cache_types()
        self.weights = quantize.check_weight_type(
            str(self.settings.get("compute_type", "default")),
            "--compute-type ([whispercpp] compute_type)",
        )
        self.model_file = self._weights_file(file_type)

    def describe_settings(self) -> dict[str, str]:
        settings = {
            "whisper-cli": f"{self.cli.path} ({self.cli.found_by})",
            "flash attention": "on" if self._flash_attn() else "off",
            "text context (-mc)": str(self._max_context()),
            "threads": str(self._threads()),
            "kv cache types": self.cache_types.describe(),
        }
        if self.weights != "default":
            settings["weights"] = f"{self.weights} ({self.model_file}, by whisper-quantize)"
        return settings

    def transcribe(self, audio: np.ndarray, request: DecodeRequest) -> Transcription:
        """Run whisper-cli to the end, then hand over its segments: they are read from its
        full JSON (token ids, probabilities, DTW times), which it writes only when done."""
        self.check_language(request, self.multilingual, list(LANGUAGES))
        beams = request.beam_size or int(self.settings.get("beam_size", 5))
        if beams < 1:
            raise UsageError("beam size must be at least 1", subject="--beam-size")
        plan = self._plan(request, beams)
        report = DecoderReport(
            kv_provenance=make_provenance(MEASURED), settings=self.describe_settings()
        )
        report.settings.update(plan.settings)
        seconds = audio.size / SAMPLE_RATE
        report.not_applicable = list(plan.not_applicable)
        report.not_applicable += self._no_speech_notes(request, plan.max_context, seconds)
        if self.weights_note:
            report.not_applicable.append(self.weights_note)
        batch = self.batch_size_for(request, seconds)
        if batch < 1:
            raise UsageError(
                f"batch size must be at least 1, got {batch}", subject=self.profile.source
            )
        processors = self.processors_for(batch, seconds)
        report.batch_size = processors
        if batch > 1:
            report.settings["batch size"] = str(batch)
            report.settings["processors (-p)"] = _describe_processors(
                processors, self._threads_per_processor(processors), batch
            )
        language = request.language or ("en" if not self.multilingual else "")
        run = Transcription(language, None, iter(()), report)
        run.segments = iter(self._run(audio, request, plan, processors, run))
        return run

    def processors_for(self, batch: int, seconds: float) -> int:
        """whisper-cli processors (-p) for a batch size: one part of the audio each, at most
        one per thread this backend may use and one per 30 s of audio (each part at least one
        whole window, as measured)."""
        return max(1, min(batch, self._threads(), int(seconds // MAX_SECONDS)))

    def argv_for(
        self, wav: Path, out: Path, request: DecodeRequest, beams: int, processors: int = 1
    ) -> list[str]:
        return self._argv(wav, out, request, self._plan(request, beams), processors)

    # -- internals -------------------------------------------------------------------------

    def _plan(self, request: DecodeRequest, beams: int) -> _Plan:
        """The request's flags and what they stand for: fallback, previous text, and what
        word timestamps need (DTW, so flash attention off and F16 caches)."""
        check_decoders(beams, "--beam-size")
        fallback = fallback_flags(request.fallback)
        max_context, context_notes = context_flags(
            request.condition_on_previous_text, request.prompt, self._max_context()
        )
        plan = _Plan(beams, max_context, self._flash_attn(), self.cache_types, fallback)
        if request.word_timestamps:
            self._plan_words(plan)
        plan.settings["beam size"] = str(beams)
        plan.settings["text context (-mc)"] = str(max_context)
        plan.settings.update(fallback.settings)
        plan.not_applicable[:0] = list(plan.cache_types.not_applicable)
        plan.not_applicable += fallback.not_applicable + context_notes
        return plan

    def _plan_words(self, plan: _Plan) -> None:
        """DTW where a preset fits the model. whisper.cpp runs DTW only without flash
        attention, which a quantized cache needs: a profile's quantized cache falls back to
        F16, one asked for on the command line is an error."""
        plan.dtw = dtw_preset(self.model.name, self.dims)
        plan.settings["word timestamps"] = (
            f"DTW, heads of {plan.dtw.how}" if plan.dtw.preset else plan.dtw.how
        )
        if plan.dtw.preset is None:
            return
        if plan.cache_types.quantized:
            if self.profile.kv_from_command_line:
                raise UsageError(
                    "word timestamps need flash attention off in whisper.cpp (DTW), and a "
                    f"{plan.cache_types.describe()} KV cache needs it on",
                    subject="--word-timestamps with --kv-policy / --kv-cross",
                    hint="drop one: F16 caches are --kv-policy full --kv-cross shared",
                )
            plan.cache_types = kvtypes.without_types(
                plan.cache_types,
                "word timestamps run whisper.cpp's DTW, which needs flash attention off, and "
                "a quantized cache needs it on; ran F16",
            )
        plan.flash_attn = False
        plan.settings["flash attention"] = "off (word timestamps: whisper.cpp's DTW needs it off)"
        plan.settings["kv cache types"] = plan.cache_types.describe()

    def _no_speech_notes(
        self, request: DecodeRequest, max_context: int, seconds: float
    ) -> list[str]:
        """whisper.cpp 1.8.5 reads the no-speech probability from the first row of the
        prompt's logits but computes only the last row: right only when the prompt is the
        start token alone (English-only model, no previous text and no --prompt)."""
        if request.fallback.no_speech_threshold is None:
            return []
        after_text = max_context != 0 and seconds > MAX_SECONDS
        if not self.multilingual and not after_text and not request.prompt:
            return []
        where = (
            "on this multilingual model"
            if self.multilingual
            else "in windows decoded after previous text or a prompt"
        )
        return [
            "no-speech test: whisper.cpp 1.8.5 reads the no-speech probability from a logits "
            f"row it does not compute {where}, so silence there is not skipped "
            "(--vad-filter removes it before decoding)"
        ]

    def _argv(
        self, wav: Path, out: Path, request: DecodeRequest, plan: _Plan, processors: int
    ) -> list[str]:
        argv = [str(self.cli.path), "-m", str(self.model_file), "-f", str(wav)]
        argv += ["-of", str(out), "-ojf", "-t", str(self._threads_per_processor(processors))]
        if processors > 1:
            argv += ["-p", str(processors)]
        argv += ["-bs", str(plan.beams), *plan.fallback.argv, "-mc", str(plan.max_context)]
        argv += ["-fa" if plan.flash_attn else "-nfa"]
        if self.cli.kv_types:
            argv += ["-kvs", plan.cache_types.self_type, "-kvc", plan.cache_types.cross_type]
        if plan.dtw is not None and plan.dtw.preset is not None:
            argv += ["-dtw", plan.dtw.preset]
        argv += ["-ng"]  # the backend runs on CPU even if this whisper-cli was built with a GPU
        argv += ["-l", request.language or ("auto" if self.multilingual else "en")]
        if request.task == "translate":
            argv.append("-tr")
        if request.prompt:
            argv += ["--prompt", request.prompt]
        return argv

    def _run(
        self,
        audio: np.ndarray,
        request: DecodeRequest,
        plan: _Plan,
        processors: int,
        run: Transcription,
    ) -> list[Segment]:
        with tempfile.TemporaryDirectory(prefix="kvscribe-whispercpp-") as work:
            wav, out = Path(work) / "audio.wav", Path(work) / "result"
            write_wav_f32(wav, audio)
            argv = self._argv(wav, out, request, plan, processors)
            outcome, printed = _execute(
                argv, Path(work) / "stderr.txt", _timeout(audio.size / SAMPLE_RATE)
            )
            logger.debug("%s\n%s", " ".join(argv), outcome.stderr)
            check_outcome(outcome, str(self.cli.path), self.model_file)
            segments = self._segments(out.with_suffix(".json"), printed, request, plan, run)
            self._language_probability(request, outcome.stderr, run)
        figures = parse_stderr(outcome.stderr)
        decoders = _peak_decoders(plan, request, _retries(outcome.stderr))
        _fill_report(run.report, figures, outcome.peak_rss_bytes, decoders)
        run.report.engine_kv_types = dict(figures.kv_types)
        run.report.engine_f16_bytes = self._f16_equivalents(figures)
        return segments

    def _segments(
        self,
        result: Path,
        printed: list[str],
        request: DecodeRequest,
        plan: _Plan,
        run: Transcription,
    ) -> list[Segment]:
        """Segments from the full JSON; from stdout's lines (text and times only) in case
        whisper-cli wrote none."""
        if not result.is_file():
            lines = [parsed for line in printed if (parsed := parse_segment_line(line))]
            return [Segment(i, start, end, text) for i, (start, end, text) in enumerate(lines)]
        full = fulljson.read(result)
        run.language = full.language or run.language
        run.report.tokens = full.decoded_tokens
        built = to_segments(full.segments, self.vocab, run.language, plan.dtw is not None)
        segments, dropped = without_annotations(built)
        run.report.settings["non-speech annotations"] = (
            f"{dropped} segment(s) that were only one ([BLANK_AUDIO], (wind), music) dropped"
        )
        return segments

    def _language_probability(self, request: DecodeRequest, stderr: str, run: Transcription):
        """The detected language's probability, printed by whisper.cpp when it detected one
        (a multilingual model and no --language)."""
        detected = fulljson.detected_language(stderr)
        if self.multilingual and request.language is None and detected is not None:
            run.language = detected[0]
            run.language_probability = detected[1]

    def _weights_file(self, file_type: int) -> Path:
        """The model file with the weights asked for. A profile's weight type is a preference:
        without whisper-quantize it runs the file's own weights and says so; --compute-type
        on the command line is a demand."""
        self.weights_note: str | None = None
        if self.weights == "default":
            return self.model.path
        tool = binary.quantize_tool(self.cli)
        try:
            return quantize.quantized_model(self.model.path, self.weights, tool, file_type)
        except BackendUnavailableError as exc:
            if self.profile.compute_type_from_command_line:
                raise
            self.weights_note = f"weights {self.weights}: {exc.message}; ran the model's own"
            self.weights = "default"
            return self.model.path

    def _cache_types(self) -> kvtypes.CacheTypes:
        """-kvs / -kvc from the profile's (or the command line's) policy; F16 with the reason
        where this whisper-cli cannot store other types; refused where it would fail."""
        wanted = kvtypes.from_policy(
            self.profile.kv_self, self.profile.kv_cross, self.dims.n_text_layer
        )
        if not wanted.quantized:
            return wanted
        if not self.cli.kv_types:
            why = f"this whisper-cli ({self.cli.path}, {self.cli.found_by}) has no KV cache types"
            if self.profile.kv_from_command_line:
                raise BackendUnavailableError(
                    f"{why}: it cannot store a {wanted.describe()} cache",
                    subject="--kv-policy / --kv-cross",
                    hint="run `kvscribe setup whisper-cpp` (kvscribe's build has them), "
                    "or ask for F16: --kv-policy full --kv-cross shared",
                )
            return kvtypes.without_types(
                wanted, f"{why}; `kvscribe setup whisper-cpp` builds one that has"
            )
        if not self._flash_attn():
            raise UsageError(
                f"a {wanted.describe()} KV cache needs flash attention in whisper.cpp "
                "(without it V is stored transposed, which a block type cannot hold)",
                subject=self._setting_source("flash_attn"),
                hint="use a profile with flash_attn = true, or F16 caches (--kv-policy full "
                "--kv-cross shared)",
            )
        return wanted

    def _f16_equivalents(self, figures: EngineFigures) -> dict[str, int]:
        """What F16 caches would hold for each cache printed in another type (derived:
        kvscribe's block arithmetic from the model's dimensions, per whisper state)."""
        positions = {"kv self": self.dims.n_text_ctx, "kv cross": self.dims.n_audio_ctx}
        return {
            name: kvtypes.cache_bytes(
                kvtypes.F16, self.dims.n_text_state, self.dims.n_text_layer, positions[name]
            )
            for name, kind in figures.kv_types.items()
            if kind != kvtypes.F16 and name in positions
        }

    def _setting_source(self, key: str) -> str:
        return f"{self.profile.source} [{self.name}] {key}"

    def _threads(self) -> int:
        """The profile's `threads`, else OMP_NUM_THREADS (a batch worker's share), else the
        cores this process may use."""
        from kvscribe.capacity import usable_cores

        if "threads" in self.settings:
            return int(self.settings["threads"])
        return usable_cores()

    def _threads_per_processor(self, processors: int) -> int:
        return max(1, self._threads() // processors)

    def _max_context(self) -> int:
        return int(self.settings.get("max_context", -1))

    def _flash_attn(self) -> bool:
        return bool(self.settings.get("flash_attn", True))


def self_cache_factor(decoders: int) -> int:
    """How many single-decoder self-attention caches whisper.cpp holds for `decoders`.

    whisper.cpp prints the size it allocates at start (one decoder), then for beam
    search silently re-allocates it (n + 2)-fold "to work around fragmentation"
    (whisper_full_with_state in 1.8.5, logged at debug level only).
    """
    return decoders + 2 if decoders > 1 else 1


def self_cache_bytes(printed_bytes: int, decoders: int) -> tuple[int, str]:
    """The self-attention bytes whisper.cpp holds for `decoders`, and their provenance: its
    own printed figure (MEASURED) at one decoder, else that figure times self_cache_factor(),
    kvscribe's reading of whisper.cpp's source (DERIVED: whisper.cpp never prints it)."""
    factor = self_cache_factor(decoders)
    return printed_bytes * factor, MEASURED if factor == 1 else DERIVED


def _execute(argv: list[str], stderr: Path, timeout: float | None) -> tuple[Outcome, list[str]]:
    """Run whisper-cli to its end: how it ended, and the lines it printed."""
    proc = WhisperProcess(argv, stderr, timeout)
    finished = False
    try:
        printed = list(proc.stdout_lines())
        outcome = proc.finish()
        finished = True
    finally:
        if not finished:
            proc.abandon()
    return outcome, printed


def _retries(stderr: str) -> int:
    match = _RETRIES.search(stderr)
    return int(match[1]) if match else 0


def _peak_decoders(plan: _Plan, request: DecodeRequest, retries: int) -> int:
    """The most decoders whisper.cpp ran at once: the beams at temperature 0, best-of
    samples above it (the first temperature, or any retry)."""
    temperatures = request.fallback.temperatures
    best_of = request.fallback.best_of
    first = plan.beams if temperatures[0] == 0 else best_of
    return max(first, best_of) if retries and len(temperatures) > 1 else first


def _fill_report(
    report: DecoderReport, figures: EngineFigures, peak_rss: int | None, decoders: int
) -> None:
    # Every whisper state (one per processor, -p) prints and holds its own caches: the
    # figures are summed over them.
    states = max(1, figures.states)
    one_state, self_provenance = self_cache_bytes(figures.kv_self_bytes, decoders)
    report.kv_self_peak_bytes = one_state * states
    report.kv_self_full_bytes = report.kv_self_peak_bytes  # whisper.cpp always allocates it whole
    # one cross cache per state, as printed
    report.kv_provenance = make_provenance(self_provenance, MEASURED)
    factor = self_cache_factor(decoders)
    if factor > 1:
        report.settings["kv self allocation"] = (
            f"{figures.kv_self_bytes / 1e6:.2f} MB x {factor} ({decoders} decoders + 2, "
            "re-allocated; derived from whisper.cpp's source)"
        )
    if states > 1:
        report.settings["kv self allocation"] = (
            report.settings.get("kv self allocation", f"{figures.kv_self_bytes / 1e6:.2f} MB")
            + f", x {states} whisper states (-p)"
        )
    report.kv_cross_bytes = figures.kv_cross_bytes * states
    report.windows = figures.runs.get("encode", 0)
    if "encode" in figures.timings_ms:
        report.encoder_seconds = figures.timings_ms["encode"] / 1000
    report.engine_memory_bytes = dict(figures.memory)
    report.engine_timings_ms = dict(figures.timings_ms)
    report.engine_runs = dict(figures.runs)
    report.engine_peak_rss_bytes = peak_rss


def _timeout(audio_seconds: float) -> float | None:
    """A deadline generous for slow machines; KVSCRIBE_WHISPER_TIMEOUT overrides (0: none)."""
    value = os.environ.get(TIMEOUT_ENV)
    if value is None:
        return 300 + 20 * audio_seconds
    try:
        seconds = float(value)
    except ValueError:
        raise UsageError(
            f"{TIMEOUT_ENV}={value!r} is not a number", hint="give seconds, or 0 for no limit"
        ) from None
    return seconds or None


def _describe_processors(processors: int, threads: int, batch: int) -> str:
    text = f"{processors} x {threads} threads"
    if processors > 1:
        text += " (the audio cut into equal parts at fixed points, one whisper state each)"
    if batch > processors:
        text += f"; batch size {batch}: at most one part per thread and per 30 s of audio"
    return text
