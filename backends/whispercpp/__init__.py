"""whisper.cpp backend: `whisper-cli` run as a child process on a ggml model.

whisper.cpp allocates its caches itself (the full text context) and shares one
cross-attention cache across beams. Of a cache policy it can express the beam
count, `-mc` (how many previous-text tokens are carried into the next window),
flash attention and, with kvscribe's patched build, the storage type of each cache:
a policy's q8_0 / q4_0 (self) and `--kv-cross ...,q8_0|q4_0` become `-kvs` / `-kvc`
(backends/whispercpp/kvtypes.py); everything else is reported as not applicable.
`compute_type` q8_0 / q5_0 / q4_0 runs on weights quantized by whisper-quantize.
Memory and timings are whisper.cpp's own figures from its stderr; peak RSS is
the child's, from wait4 (the largest of the runs when an input ran as pieces).

The audio streams: it is read a block at a time into a float WAV, never whole, and an
input longer than 4 minutes runs as pieces of at most that length cut at quiet points,
one whisper-cli run each, since whisper-cli holds its whole input and its log-mel
(backends/whispercpp/pieces.py, session.py: the language detected on the first piece and
the text so far are passed on). Shorter inputs, and live mode's, run once as before.

Segments come from whisper-cli's full JSON (-ojf, written when it finishes, so each run
goes to its end): text token ids, mean token log-probability, the window (seek), and
with word timestamps words from whisper.cpp's DTW token times (backends/whispercpp/words.py;
-dtw needs flash attention off, so a profile's quantized caches run F16 then). Fallback
thresholds, best-of and previous-text conditioning become -tp/-tpi/-nf, -et, -lpt, -nth,
-bo and -mc (backends/whispercpp/flags.py, with what whisper.cpp does differently).

A batch size over 1 on audio over 30 s becomes whisper-cli's `-p N` (per piece): the audio
cut into N equal parts at fixed points, each decoded by its own whisper state in its own thread,
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

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from kvscribe import setting_rows as row
from kvscribe.audio.stream import Samples
from kvscribe.backends.base import Backend
from kvscribe.backends.whispercpp import binary, fulljson, kvtypes, quantize
from kvscribe.backends.whispercpp.engine_report import (
    fill_report,
    peak_decoders,
    self_cache_bytes,
    self_cache_factor,
)
from kvscribe.backends.whispercpp.flags import check_decoders, context_flags, fallback_flags
from kvscribe.backends.whispercpp.languages import LANGUAGES
from kvscribe.backends.whispercpp.pieces import piece_limit
from kvscribe.backends.whispercpp.plan import Plan, Run, argv, describe_processors, no_speech_notes
from kvscribe.backends.whispercpp.process import SAMPLE_RATE, check_outcome
from kvscribe.backends.whispercpp.report import EngineFigures, merged
from kvscribe.backends.whispercpp.session import Job, Session
from kvscribe.backends.whispercpp.words import dtw_preset
from kvscribe.chunking import MAX_SECONDS
from kvscribe.contract import Capabilities, DecodeRequest, DecoderReport, Transcription
from kvscribe.errors import BackendUnavailableError, UsageError
from kvscribe.models import ggml
from kvscribe.provenance import MEASURED, make_provenance
from kvscribe.types import Segment

__all__ = ["WhisperCppBackend", "self_cache_bytes", "self_cache_factor"]

_SETTINGS = {
    "beam_size": int,
    "max_context": int,
    "flash_attn": bool,
    "threads": int,
    "batch_size": int,  # > 1: whisper-cli's -p on audio over 30 s (processors_for)
    "compute_type": str,  # weights: default (the file's) or q8_0 / q5_0 / q4_0 (quantize.py)
    # true: no -ng, so a whisper-cli built with a GPU backend (CUDA, Metal) runs on it; the
    # GPU check measures whisper.cpp on a lent GPU this way (benchmarks/gpu_check.py).
    "use_gpu": bool,
}


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
        streams_audio=True,
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
            row.WHISPER_CLI: f"{self.cli.path} ({self.cli.found_by})",
            row.FLASH_ATTENTION: "on" if self._flash_attn() else "off",
            row.TEXT_CONTEXT: str(self._max_context()),
            row.THREADS: str(self._threads()),
            row.KV_CACHE_TYPES: self.cache_types.describe(),
        }
        if self.weights != "default":
            settings[row.WEIGHTS] = f"{self.weights} ({self.model_file}, by whisper-quantize)"
        return settings

    def completed(self, request: DecodeRequest) -> DecodeRequest:
        # Its profile section says whether windows see the text before them by max_context
        # (-mc): 0 is off.
        if request.condition_on_previous_text is None:
            max_context = self.profile.settings_for(self.name).get("max_context", -1)
            request = replace(request, condition_on_previous_text=max_context != 0)
        return super().completed(request)

    def decode(self, audio: Samples, request: DecodeRequest) -> Transcription:
        """Run whisper-cli on the audio, a piece at a time when it is long (see
        backends/whispercpp/pieces.py); each piece's segments are read from its full JSON
        (token ids, probabilities, DTW times), which whisper-cli writes when done. The first
        piece (a short input's only one) runs here, the others as the segments are read."""
        self.check_language(request, self.multilingual, list(LANGUAGES))
        beams = request.beam_size
        if beams < 1:
            raise UsageError("beam size must be at least 1", subject="--beam-size")
        plan = self._plan(request, beams)
        report = DecoderReport(
            kv_provenance=make_provenance(MEASURED), settings=self.describe_settings()
        )
        report.settings.update(plan.settings)
        seconds = audio.size / SAMPLE_RATE
        report.not_applicable = list(plan.not_applicable)
        own_build = self.cli.path == binary.own_build_path()  # patched: the row is right
        report.not_applicable += no_speech_notes(
            request, self.multilingual, plan.max_context, seconds, own_build
        )
        if self.weights_note:
            report.not_applicable.append(self.weights_note)
        batch = self.batch_size_for(request, seconds)
        if batch < 1:
            raise UsageError(
                f"batch size must be at least 1, got {batch}", subject=self.profile.source
            )
        if batch > 1:
            report.settings[row.BATCH_SIZE] = str(batch)
        limit = piece_limit()
        language = request.language or ("en" if not self.multilingual else "")
        run = Transcription(language, None, iter(()), report)
        pieces = self._pieces(audio, limit, Session(self._job(request, plan, batch), run))
        first = next(pieces)
        run.segments = itertools.chain(first, itertools.chain.from_iterable(pieces))
        return run

    def processors_for(self, batch: int, seconds: float) -> int:
        """whisper-cli processors (-p) for a batch size: one part of the audio each, at most
        one per thread this backend may use and one per 30 s of audio (each part at least one
        whole window, as measured)."""
        return max(1, min(batch, self._threads(), int(seconds // MAX_SECONDS)))

    def argv_for(
        self, wav: Path, out: Path, request: DecodeRequest, beams: int, processors: int = 1
    ) -> list[str]:
        """whisper-cli's argv for `wav` whole (benchmarks run it directly)."""
        threads = self._threads_per_processor(processors)
        language = request.language or ("auto" if self.multilingual else "en")
        run = Run(wav, out, threads, processors, language, request.prompt)
        return argv(self._base_argv(), self._plan(request, beams), run, request, self.cli.kv_types)

    # -- internals -------------------------------------------------------------------------

    def _plan(self, request: DecodeRequest, beams: int) -> Plan:
        """The request's flags and what they stand for: fallback, previous text, and what
        word timestamps need (DTW, so flash attention off and F16 caches)."""
        check_decoders(beams, "--beam-size")
        fallback = fallback_flags(request.fallback)
        max_context, context_notes = context_flags(
            request.condition_on_previous_text, request.prompt, self._max_context()
        )
        plan = Plan(beams, max_context, self._flash_attn(), self.cache_types, fallback)
        plan.use_gpu = bool(self.settings.get("use_gpu", False))
        if request.word_timestamps:
            self._plan_words(plan)
        plan.settings[row.BEAM_SIZE] = str(beams)
        plan.settings[row.TEXT_CONTEXT] = str(max_context)
        plan.settings.update(fallback.settings)
        plan.not_applicable[:0] = list(plan.cache_types.not_applicable)
        plan.not_applicable += fallback.not_applicable + context_notes
        return plan

    def _plan_words(self, plan: Plan) -> None:
        """DTW where a preset fits the model. whisper.cpp runs DTW only without flash
        attention, which a quantized cache needs: a profile's quantized cache falls back to
        F16, one asked for on the command line is an error."""
        plan.dtw = dtw_preset(self.model.name, self.dims)
        plan.settings[row.WORD_TIMESTAMPS] = (
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
        dtw_off = "off (word timestamps: whisper.cpp's DTW needs it off)"
        plan.settings[row.FLASH_ATTENTION] = dtw_off
        plan.settings[row.KV_CACHE_TYPES] = plan.cache_types.describe()

    def _base_argv(self) -> list[str]:
        return [str(self.cli.path), "-m", str(self.model_file)]

    def _job(self, request: DecodeRequest, plan: Plan, batch: int) -> Job:
        return Job(
            base=self._base_argv(),
            plan=plan,
            request=request,
            kv_types=self.cli.kv_types,
            threads=self._threads(),
            batch=batch,
            processors_for=self.processors_for,
            check=lambda outcome: check_outcome(outcome, str(self.cli.path), self.model_file),
            vocab=self.vocab,
            multilingual=self.multilingual,
        )

    def _pieces(self, audio: Samples, limit: int, session: Session) -> Iterator[list[Segment]]:
        """Each piece's segments; the report is filled before the last piece's are handed
        over, so it is complete when the segments are exhausted."""
        for segments in session.segments(audio, limit):
            if session.done:
                self._fill(session)
            yield segments

    def _fill(self, session: Session) -> None:
        """The report from every piece's figures: caches and memory as the largest piece
        held them (peak RSS: the largest of the runs), timings and windows added up."""
        report, plan = session.run.report, session.job.plan
        figures = merged(session.figures)
        decoders = peak_decoders(plan.beams, session.job.request, session.retried)
        fill_report(report, figures, session.peak_rss, decoders)
        report.engine_f16_bytes = self._f16_equivalents(figures)
        report.batch_size = session.processors
        if session.job.batch > 1:
            report.settings[row.PROCESSORS] = describe_processors(
                session.processors,
                self._threads_per_processor(session.processors),
                session.job.batch,
            )
        report.settings[row.NON_SPEECH] = (
            f"{session.maker.dropped} segment(s) that were only one ([BLANK_AUDIO], (wind), "
            "music) dropped"
        )
        if session.pieces > 1:
            carried = "; the text so far carried as --prompt" if plan.conditions else ""
            report.settings[row.PIECES] = (
                f"{session.pieces} whisper-cli runs of at most {session.limit_seconds:g} s, "
                f"cut at the quietest point before each end{carried}"
            )

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
            self.profile.self_specs(self.dims.n_text_layer),
            self.profile.kv_self,
            self.profile.kv_cross,
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
        from kvscribe.machine.capacity import usable_cores

        if "threads" in self.settings:
            return int(self.settings["threads"])
        return usable_cores()

    def _threads_per_processor(self, processors: int) -> int:
        return max(1, self._threads() // processors)

    def _max_context(self) -> int:
        return int(self.settings.get("max_context", -1))

    def _flash_attn(self) -> bool:
        return bool(self.settings.get("flash_attn", True))
