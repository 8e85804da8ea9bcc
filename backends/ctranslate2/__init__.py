"""CTranslate2 backend: faster-whisper's WhisperModel, int8 on CPU by default.

Files stream: the audio is read in slices and features computed a window at a time
(sequential: stream.py beside this file; batched: per speech chunk, batched.py), and the VAD
filter fed in blocks (silence.py, vad.py), so memory does not grow with the file's length.

CTranslate2 keeps every decoded position's K/V and one cross-attention copy per
beam; of a cache policy it can express the compute type, the beam count and the
previous-text prompt. Everything else in a profile's policy is reported as not
applicable, never silently dropped. KV figures are estimates from the model's
dimensions (the engine does not expose its cache): backends/ctranslate2/report.py.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterator, Sequence

from kvscribe import chunk_rounds
from kvscribe import setting_rows as row
from kvscribe.aligned_chunks import decoded_segments, shared_segments
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.mel import ENCODER_MARGIN, FRAMES_PER_WINDOW, encoder_frames
from kvscribe.audio.stream import Samples, hold_history
from kvscribe.backends.base import Backend
from kvscribe.backends.ctranslate2 import engine_choice, halves, stretched
from kvscribe.backends.ctranslate2 import report as ct2_report
from kvscribe.backends.ctranslate2 import stream as ct2_stream
from kvscribe.backends.ctranslate2.group_encoding import (
    EncodedAhead,
    detect_language,
    encode_windows,
)
from kvscribe.backends.ctranslate2.replicas import load as load_engines
from kvscribe.backends.ctranslate2.silence import SpeechClock, to_decode
from kvscribe.backends.ctranslate2.windows import WindowCounter
from kvscribe.chunking import MAX_SECONDS, Chunk, batched_rules, shared_by_language, speech_chunks
from kvscribe.contract import (
    OPTIONAL_FIELDS,
    Capabilities,
    DecodeRequest,
    DecoderReport,
    Transcription,
)
from kvscribe.decoding import SAMPLING_SEED
from kvscribe.errors import BackendUnavailableError
from kvscribe.models.ct2_file import whisper_dims
from kvscribe.types import Segment

_SETTINGS = {
    "compute_type": str,
    "encoder": str,  # "auto" (measured once per machine), "onnxruntime" or "ctranslate2"
    "beam_size": int,
    "condition_on_previous_text": bool,
    "cpu_threads": int,
    "batch_size": int,
}
_CHOICES = {"encoder": engine_choice.ENCODERS}


class CTranslate2Backend(Backend):
    name = "ctranslate2"
    summary = "faster-whisper on CTranslate2 (int8 on CPU)"
    capabilities = Capabilities(
        model_formats=("ctranslate2",),
        devices=("cpu", "cuda"),
        kv_controls=("compute_type", "beam_size", "previous-text prompt"),
        batched=True,
        vad_filter=True,
        streams_audio=True,
        batched_cuts_pauses=True,
        shares_batches=True,
        batched_prompts=True,
        honours=frozenset(OPTIONAL_FIELDS),
    )

    requires = ("ctranslate2", "faster_whisper")
    settings_schema = _SETTINGS
    setting_choices = _CHOICES
    install_hint = "pip install faster-whisper"

    def load(self) -> None:
        import ctranslate2

        self.settings = self.profile_settings(_SETTINGS)
        if self.device == "cuda" and ctranslate2.get_cuda_device_count() == 0:
            raise BackendUnavailableError(
                "no CUDA device found",
                subject=self.name,
                hint="use --device cpu or --profile cpu-laptop",
            )
        self.dims = whisper_dims(self.model.path / "model.bin")
        # CTranslate2 samples (temperature fallback) from a generator per engine thread,
        # seeded when the thread first samples: without a seed set first, from the OS, so
        # the same file gave other text in every process (backends/ctranslate2/sampling.py).
        ctranslate2.set_random_seed(SAMPLING_SEED)
        wanted = self.settings.get("compute_type", "default")
        if wanted not in engine_choice.COMPUTE_TYPES:
            raise self.bad_compute_type(wanted, engine_choice.COMPUTE_TYPES)
        self._choice = engine_choice.choose(self.settings, self.device, self.model)
        self._engines = load_engines(
            str(self._choice.weights),
            self.device,
            self._choice.compute_type,
            self._choice.threads,
            self.dims.n_text_state,
        )
        self.engine = self._engines.engine
        self._encoder_row = self._choose_encoder()

    def expect(self, request: DecodeRequest) -> None:
        """Word times on a one-row path (live mode asks for them at every decode) are aligned
        on the every-thread engine: start its load now rather than at the first decode."""
        if request.word_timestamps:
            self._engines.start_whole()

    def describe_settings(self) -> dict[str, str]:
        return {
            row.COMPUTE_TYPE: self.engine.model.compute_type,
            row.PREVIOUS_TEXT: "on" if self.profile_conditions() else "off",
            row.ENCODER: self._encoder_row,
        }

    def decode(self, audio: Samples, request: DecodeRequest) -> Transcription:
        self.check_language(request, self.dims.is_multilingual, self.engine.supported_languages)
        beams = request.beam_size
        batch = self.batch_size_for(request, audio.size / SAMPLE_RATE)
        if batch > 1:
            return self._transcribe_batched(audio, request, beams, batch)
        many_windows = audio.size > MAX_SECONDS * SAMPLE_RATE
        conditioned = request.condition_on_previous_text
        report = self._report(beams, request)
        report.settings[row.PREVIOUS_TEXT] = "on" if conditioned else "off"
        clock = SpeechClock.of(audio, request.vad) if request.vad is not None else None
        if clock is not None and clock.speech.size == 0:
            # nothing but silence: nothing to decode, nothing to say
            language, probability = self._language_without_audio(request)
            return Transcription(language, probability, iter(()), report)
        decoded = to_decode(audio, clock)
        frames = self._encoder_frames(decoded, request, report)
        engine = self._one_row_engine(report)
        options = ct2_stream.transcribe_options(request, beams, conditioned)
        on_replica = self._engines.rows_on_replica
        # Halved where the input's own frames say (the VAD's speech of an array is an array,
        # of a file a Joined: both cut as the Joined, so an array reads as its file).
        speech = decoded if clock is None else clock.speech
        at = halves.cut(speech) if frames is None and on_replica else None
        # More than one window: a window's skipped speech would move the seek of the next
        rereads = stretched.Rereads() if request.reread_stretched and many_windows else None
        if at is None:
            raw, info = stretched.transcribe(engine, decoded, options, rereads, frames)
        else:
            engines = halves.HalfEngines(self._engines.beside(), self._engines.beside)
            raw, info = halves.transcribe(
                engines, decoded, at, options, report, self._choice.threads, rereads
            )
        if clock is not None:
            raw = map(clock.restore, raw)
        # faster-whisper says 1 for a language it was given or an English-only model's;
        # kvscribe says "not measured", as the other backends do.
        detected = request.language is None and self.dims.is_multilingual
        probability = float(info.language_probability) if detected else None
        return Transcription(
            info.language,
            probability,
            self._stream(raw, report, request, rereads),
            report,
        )

    def _transcribe_batched(
        self, audio: Samples, request: DecodeRequest, beams: int, batch: int
    ) -> Transcription:
        from kvscribe.backends.ctranslate2 import batched as ct2_batched

        whole_load = ct2_report.WholeLoadWatch(self._engines.on_demand)
        chunking_started = time.perf_counter()
        chunks = speech_chunks(audio, batched_rules(request.vad))
        chunking_seconds = time.perf_counter() - chunking_started
        # A span of lanes and its rounds' tails are read back over: keep them readable.
        hold_history(audio, chunk_rounds.history_seconds(batch))
        ahead = EncodedAhead(limit=1)
        language, probability = self._language_of(audio, chunks, request, ahead)
        replicas = self._engines
        plan, tokenizer = ct2_batched.setup(self.engine, language, request, beams, batch, replicas)
        report = self._batched_report(beams, request, batch, replicas.workers, len(chunks))
        report.stage_seconds[ct2_batched.STAGE_CHUNKS] = chunking_seconds
        prompted = bool(request.condition_on_previous_text)
        tally = ct2_report.ChunkTally(self.dims, len(plan.prompt))

        def stream() -> Iterator[Segment]:
            yield from decoded_segments(
                chunks,
                batch,
                lambda group, rereads=None, previous=None: ct2_batched.decode_group(
                    plan, (audio,), group, report, ahead, rereads, previous
                ),
                tokenizer.decode,
                plan.fallback,
                plan.word_timestamps,
                seen=tally.seen,
                unread=report.left_unread,
                prompted=prompted,
            )
            rows = min(batch, max(1, len(chunks)))
            ct2_report.count_windows(report, self._basis(), tally.windows, beams, rows)
            tally.note_prompts(report, prompted, len(chunks))
            whole_load.note(report)

        return Transcription(language, probability, stream(), report)

    def decode_together(
        self, audios: Sequence[Samples], request: DecodeRequest
    ) -> list[Transcription]:
        """Short inputs (each within one window) decoded side by side, as the speech chunks
        of a long file are: each input's chunks are one run, the runs of inputs in the same
        language share the batches (kvscribe.aligned_chunks.shared_segments). Decoded
        before this returns: an input's batch holds the others' chunks."""
        from kvscribe.backends.ctranslate2 import batched as ct2_batched

        self.check_language(request, self.dims.is_multilingual, self.engine.supported_languages)
        beams = request.beam_size
        batch = self.batch_size_for(request, math.inf)  # what a long file's chunks get
        ahead = EncodedAhead(limit=batch)

        def decode(language: str, runs: list[list[Chunk]]):
            replicas = self._engines
            plan, tokenizer = ct2_batched.setup(
                self.engine, language, request, beams, batch, replicas
            )
            return self._shared_run(plan, tokenizer, request, audios, runs, ahead)

        def language_of(audio, chunks, request):
            return self._language_of(audio, chunks, request, ahead)

        return shared_by_language(audios, request, language_of, decode)

    def _shared_run(self, plan, tokenizer, request, audios, chunked: list[list[Chunk]], ahead):
        """(segments, report) of each input whose chunks are `chunked` (one language), the
        inputs' runs of chunks decoded side by side (`ahead`: rows language detection
        encoded)."""
        from kvscribe.backends.ctranslate2 import batched as ct2_batched

        chunks = [chunk for run in chunked for chunk in run]
        workers = plan.replicas.workers
        reports = [
            self._batched_report(plan.beams, request, plan.batch, workers, len(chunks))
            for _ in chunked
        ]
        report_of = {run[0].source: r for run, r in zip(chunked, reports, strict=True) if run}
        windows = {source: WindowCounter(self.dims, conditioned=False) for source in report_of}
        whole_load = ct2_report.WholeLoadWatch(self._engines.on_demand)
        segments = shared_segments(
            chunks,
            len(audios),
            plan.batch,
            lambda group, rereads=None: ct2_batched.decode_group(
                plan, audios, group, ahead=ahead, rereads=rereads
            ),
            tokenizer.decode,
            plan.fallback,
            plan.word_timestamps,
            seen=lambda source, result: windows[source].add_chunk(len(result.tokens)),
            unread=lambda part: report_of[part.source].left_unread(part),
        )
        rows = min(plan.batch, max(1, len(chunks)))
        decoded = []
        for run, report in zip(chunked, reports, strict=True):
            report.settings[row.BATCH_SIZE] += " (short files share them)"
            if run:
                counted = windows[run[0].source]
                ct2_report.count_windows(report, self._basis(), counted, plan.beams, rows)
            whole_load.note(report)
            decoded.append((segments[run[0].source] if run else [], report))
        return decoded

    def shares_batches(self, request: DecodeRequest) -> bool:
        """Short files share batches where a batch's rows have several cores to go to (the
        replicas) or a GPU. On one core a file decoded alone (one window, timestamp tokens,
        no alignment pass) is cheaper: folders of short files took 1.17-1.34x its time
        shared, and 0.57-0.59x shared with two cores (benchmarks/results/folder_batches.md)."""
        has_cores = self.device != "cpu" or self._choice.threads > 1
        return has_cores and super().shares_batches(request)

    def kv_row_bytes(self, request: DecodeRequest) -> tuple[int, str]:
        """One chunk's cache at its largest, estimated from the model's dimensions
        (CTranslate2 does not expose its cache): every position of a full window and one
        cross-attention copy per beam."""
        return ct2_report.row_bytes(self._basis(), self.completed(request).beam_size)

    def honours(self, request: DecodeRequest, batched: bool) -> frozenset[str]:
        # The hallucination test reads word times across a window's neighbours, which only
        # faster-whisper's sequential transcribe() has; a shorter encoder window is for
        # audio of one window, decoded alone.
        if batched:
            return self.capabilities.honours - {"hallucination_silence_threshold", "encoder_window"}
        return self.capabilities.honours

    @staticmethod
    def _encoder_frames(audio: Samples, request: DecodeRequest, report) -> int | None:
        """The encoder window's frames for `request.encoder_window` (live mode), where the
        audio fits one window; None: Whisper's 30 s (docs/live.md, "Encoder window")."""
        if request.encoder_window is None or audio.size > MAX_SECONDS * SAMPLE_RATE:
            return None
        report.settings[row.ENCODER_WINDOW] = (
            f"audio + {ENCODER_MARGIN:g} s, at least {request.encoder_window:g} s"
        )
        frames = encoder_frames(audio.size / SAMPLE_RATE, request.encoder_window)
        # The cross-attention cache holds the window's positions, not 30 s worth.
        report.kv_cross_bytes = report.kv_cross_bytes * frames // FRAMES_PER_WINDOW
        return frames

    def _language_of(
        self, audio, chunks, request: DecodeRequest, ahead: EncodedAhead | None = None
    ) -> tuple[str, float | None]:
        """The request's language, else the one detected on the first speech chunk (its
        encoder row kept in `ahead` for its batch)."""
        if request.language is not None or not self.dims.is_multilingual or not chunks:
            return self._language_without_audio(request)
        return detect_language(self._engines, audio, chunks[0], ahead)

    def _language_without_audio(self, request: DecodeRequest) -> tuple[str, float | None]:
        """A given language, or English for an English-only model or when there is no speech
        to detect a language from; never detected, so no probability (faster-whisper says 1
        for an English-only model; the other backends and openai-whisper report none)."""
        return request.language or "en", None

    # -- internals -------------------------------------------------------------------------

    def _basis(self) -> ct2_report.ReportBasis:
        return ct2_report.ReportBasis(
            self.dims, self.engine.model.compute_type, self.profile.kv_self, self.profile.kv_cross
        )

    def _report(self, beams: int, request: DecodeRequest) -> DecoderReport:
        return ct2_report.base_report(self._basis(), self.describe_settings(), beams, request)

    def _batched_report(
        self, beams: int, request: DecodeRequest, batch: int, workers: int, chunks: int
    ) -> DecoderReport:
        return ct2_report.batched_report(
            self._basis(), self.describe_settings(), beams, request, batch, workers, chunks
        )

    def _one_row_engine(self, report: DecoderReport):
        """The engine for faster-whisper's sequential transcribe: on a CPU with several
        threads, its beam search on a single-thread replica (backends/ctranslate2/replicas.py)."""
        engine = self._engines.one_row_engine
        if self._engines.rows_on_replica:
            threads = self._choice.threads
            report.settings[row.ENGINE_THREADS] = (
                f"{threads} (beam search: 1 of {threads} single-thread replicas)"
            )
        return engine

    def _choose_encoder(self) -> str:
        """Run the encoder on onnxruntime where the profile says so or, by default, where it
        measures faster here (backends/ctranslate2/encoder.py); the stats row saying which.
        Where the one-row paths would run every window on the every-thread engine (its
        CTranslate2 encoder, or a decoder too wide for a replica), its load starts now."""
        from kvscribe.backends.ctranslate2 import encoder

        candidate = encoder.Candidate(
            self.model.path,
            self.model.name,
            self.engine.model.compute_type,
            self._choice.threads,
            functools.partial(encode_windows, self._engines),  # as the batched chunks run it
        )
        engines = self._engines
        wholes = [] if engines.whole is engines.engine else [engines.whole]
        choice = encoder.install(
            [engines.engine, *wholes], self.settings.get("encoder", "auto"), self.device, candidate
        )
        if choice.encoder is None or not engines.rows_on_replica:
            # every window of a one-row path runs on the every-thread engine: load it now
            engines.start_whole()
        return choice.row

    def _stream(
        self,
        raw: Iterator,
        report: DecoderReport,
        request: DecodeRequest,
        rereads: stretched.Rereads | None,
    ) -> Iterator[Segment]:
        whole_load = ct2_report.WholeLoadWatch(self._engines.on_demand)
        windows = WindowCounter(self.dims, request.condition_on_previous_text)
        yield from ct2_stream.segments(raw, windows, request.fallback, request.word_timestamps)
        ct2_report.count_windows(report, self._basis(), windows, request.beam_size)
        if rereads is not None and rereads.stretches:
            report.settings[row.READ_AGAIN] = rereads.describe()
        whole_load.note(report)
