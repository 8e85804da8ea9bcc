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
import tempfile
from collections.abc import Iterator
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
from kvscribe.whispercpp import binary, kvtypes, quantize
from kvscribe.whispercpp.languages import LANGUAGES
from kvscribe.whispercpp.process import (
    SAMPLE_RATE,
    WhisperProcess,
    check_outcome,
    write_wav_f32,
)
from kvscribe.whispercpp.report import EngineFigures, parse_json, parse_segment_line, parse_stderr

_SETTINGS = {
    "beam_size": int,
    "max_context": int,
    "flash_attn": bool,
    "threads": int,
    "batch_size": int,  # > 1: whisper-cli's -p on audio over 30 s (processors_for)
    "compute_type": str,  # weights: default (the file's) or q8_0 / q5_0 / q4_0 (quantize.py)
}
TIMEOUT_ENV = "KVSCRIBE_WHISPER_TIMEOUT"
logger = logging.getLogger(__name__)


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
        self.multilingual = self.n_vocab >= 51865
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
        self.check_language(request, self.multilingual, list(LANGUAGES))
        beams = request.beam_size or int(self.settings.get("beam_size", 5))
        if beams < 1:
            raise UsageError("beam size must be at least 1", subject="--beam-size")
        report = DecoderReport(
            kv_provenance=make_provenance(MEASURED), settings=self.describe_settings()
        )
        report.settings["beam size"] = str(beams)
        report.not_applicable = list(self.cache_types.not_applicable)
        if self.weights_note:
            report.not_applicable.append(self.weights_note)
        seconds = audio.size / SAMPLE_RATE
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
        run.segments = self._stream(audio, request, beams, processors, run)
        return run

    def processors_for(self, batch: int, seconds: float) -> int:
        """whisper-cli processors (-p) for a batch size: one part of the audio each, at most
        one per thread this backend may use and one per 30 s of audio (each part at least one
        whole window, as measured)."""
        return max(1, min(batch, self._threads(), int(seconds // MAX_SECONDS)))

    # -- internals -------------------------------------------------------------------------

    def _stream(
        self,
        audio: np.ndarray,
        request: DecodeRequest,
        beams: int,
        processors: int,
        run: Transcription,
    ) -> Iterator[Segment]:
        with tempfile.TemporaryDirectory(prefix="kvscribe-whispercpp-") as work:
            wav, out = Path(work) / "audio.wav", Path(work) / "result"
            write_wav_f32(wav, audio)
            argv = self.argv_for(wav, out, request, beams, processors)
            proc = WhisperProcess(
                argv, Path(work) / "stderr.txt", _timeout(audio.size / SAMPLE_RATE)
            )
            finished = False
            try:
                index = 0
                for line in proc.stdout_lines():
                    parsed = parse_segment_line(line)
                    if parsed is not None:
                        yield Segment(index, parsed[0], parsed[1], parsed[2])
                        index += 1
                outcome = proc.finish()
                finished = True
            finally:
                if not finished:
                    proc.abandon()
            logger.debug("%s\n%s", " ".join(argv), outcome.stderr)
            check_outcome(outcome, str(self.cli.path), self.model_file)
            figures = parse_stderr(outcome.stderr)
            result = out.with_suffix(".json")
            if result.is_file():
                parsed_json = parse_json(result)
                run.language = parsed_json.language or run.language
                run.report.tokens = parsed_json.decoded_tokens
            _fill_report(run.report, figures, outcome.peak_rss_bytes, beams)
            run.report.engine_kv_types = dict(figures.kv_types)
            run.report.engine_f16_bytes = self._f16_equivalents(figures)

    def argv_for(
        self, wav: Path, out: Path, request: DecodeRequest, beams: int, processors: int = 1
    ) -> list[str]:
        argv = [str(self.cli.path), "-m", str(self.model_file), "-f", str(wav)]
        argv += ["-of", str(out), "-ojf", "-t", str(self._threads_per_processor(processors))]
        if processors > 1:
            argv += ["-p", str(processors)]
        argv += ["-bs", str(beams), "-bo", str(beams), "-mc", str(self._max_context())]
        argv += ["-fa" if self._flash_attn() else "-nfa"]
        if self.cli.kv_types:
            argv += ["-kvs", self.cache_types.self_type, "-kvc", self.cache_types.cross_type]
        argv += ["-ng"]  # the backend runs on CPU even if this whisper-cli was built with a GPU
        argv += ["-l", request.language or ("auto" if self.multilingual else "en")]
        if request.task == "translate":
            argv.append("-tr")
        if request.prompt:
            argv += ["--prompt", request.prompt]
        return argv

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


def _fill_report(
    report: DecoderReport, figures: EngineFigures, peak_rss: int | None, beams: int
) -> None:
    # -bo equals -bs, so fallbacks never use more decoders. Every whisper state (one per
    # processor, -p) prints and holds its own caches: the figures are summed over them.
    states = max(1, figures.states)
    one_state, self_provenance = self_cache_bytes(figures.kv_self_bytes, beams)
    report.kv_self_peak_bytes = one_state * states
    report.kv_self_full_bytes = report.kv_self_peak_bytes  # whisper.cpp always allocates it whole
    # one cross cache per state, as printed
    report.kv_provenance = make_provenance(self_provenance, MEASURED)
    factor = self_cache_factor(beams)
    if factor > 1:
        report.settings["kv self allocation"] = (
            f"{figures.kv_self_bytes / 1e6:.2f} MB x {factor} ({beams} beams + 2, re-allocated;"
            " derived from whisper.cpp's source)"
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
