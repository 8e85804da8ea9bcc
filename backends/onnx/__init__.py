"""onnx backend: Whisper exported to ONNX (`kvscribe setup onnx`), run by onnxruntime with
kvscribe's KV-cache policies between decoder steps; numpy and onnxruntime at run time, no
torch.

The graphs are backends/onnx/graphs.py's (an encoder returning every layer's cross-
attention K/V, a decoder step taking the kept self-attention K/V and the tokens'
positions); backends/onnx/engine.py runs them with the cache in kvscribe.kvcache's classes
on numpy arrays, and the decoding is the stepped core the transformers backend runs:
kvscribe/stepped/longform.py's 30 s windows with previous-text prompts, timestamp rules
and seeking, greedy and beam search, temperature fallback; kvscribe/stepped/batched.py's
speech chunks decoded side by side (`batch_size` over 1, on files over 30 s). Features are
openai-whisper's log-mel in numpy (kvscribe.audio.streamed_mel.WhisperNumpyFrontEnd), a window
or a chunk at a time.

Not here: half layers (the step graph takes K/V; reported "not applicable", those layers
kept whole).
"""

from __future__ import annotations

import json
from dataclasses import replace

from kvscribe import setting_rows as row
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.mel import FRAMES_PER_WINDOW
from kvscribe.audio.stream import Samples, hold_history
from kvscribe.backends.base import Backend
from kvscribe.contract import Capabilities, DecodeRequest, DecoderReport, Transcription
from kvscribe.errors import BackendUnavailableError, ModelNotFoundError
from kvscribe.kvcache.spec import CrossSpec, parse_cross
from kvscribe.provenance import MEASURED, make_provenance
from kvscribe.stepped.request import decoding_rows
from kvscribe.stepped.sharing import SharesSteppedBatches

_SETTINGS = {
    "beam_size": int,
    "condition_on_previous_text": bool,
    "threads": int,
    "batch_size": int,
    "compute_type": str,
    "kv_budget_mb": int,
}
_COMPUTE_TYPES = ("float32", "int8")
_PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
_SETUP_HINT = "run `kvscribe setup onnx` (with --model as here) first"


class OnnxBackend(SharesSteppedBatches, Backend):
    name = "onnx"
    summary = "ONNX Runtime with kvscribe's KV-cache policies between steps (no torch)"
    capabilities = Capabilities(
        model_formats=("transformers",),
        devices=("cpu", "cuda"),
        kv_controls=("window", "sink", "q8_0", "q4_0", "cross shared", "cross q8_0", "beam size"),
        batched=True,
        streams_audio=True,
        batched_cuts_pauses=True,
        shares_batches=True,
        # The step graph has no key mask: a row's tokens can change with the rows beside it
        # (tests/test_serve.py, test_every_engine_gives_a_request_its_tokens_under_load).
        rows_independent=False,
        # One worker (sharing batches) over both cores took 0.72x the time of two workers,
        # each of whose ONNX Runtime sessions takes every core
        # (benchmarks/results/folder_batches_onnx.md).
        worker_per_core=False,
        honours=frozenset({"hotwords", "max_new_tokens", "suppress_tokens"}),
    )
    requires = ("onnxruntime", "tokenizers")
    settings_schema = _SETTINGS
    install_hint = "pip install 'kvscribe[onnx]'"

    @classmethod
    def devices_here(cls) -> str:
        """onnxruntime's execution providers in this install (`--device cpu` runs on CPU's,
        `--device cuda` on CUDA's)."""
        import onnxruntime

        available = onnxruntime.get_available_providers()
        names = [p.removesuffix("ExecutionProvider") for p in available if p in _PROVIDERS.values()]
        return "onnxruntime: " + ", ".join(names)  # the devices it runs on (not Azure's service)

    def load(self) -> None:
        from kvscribe.backends.onnx.engine import OnnxEngine, applicable_specs
        from kvscribe.stepped.vocabulary import Vocabulary

        self.settings = self.profile_settings(_SETTINGS)
        self.compute_type = self._compute_type()
        export = self._export()
        self.engine = OnnxEngine(
            export, self.compute_type, (self._provider(),), self.settings.get("threads")
        )
        self.vocab = Vocabulary(self.model.path)
        config = json.loads((self.model.path / "config.json").read_text(encoding="utf-8"))
        self.n_mels = int(config["num_mel_bins"])
        self.text_ctx = int(config["max_target_positions"])
        self.vocab_size = int(config["vocab_size"])
        specs = self.profile.self_specs(self.engine.layers)
        self.self_specs, self.notes = applicable_specs(specs)
        self.cross_spec = self._cross_spec(parse_cross(self.profile.kv_cross))
        self._chunk_bytes: dict = {}  # (beams, policies) -> KV bytes one chunk holds
        self.aligner = self._aligner()  # None: the export names no alignment heads

    def _cross_spec(self, asked: CrossSpec) -> CrossSpec:
        """The step graph folds a chunk's beams into its queries against one cross-attention
        copy: a copy per beam (`full`, a profile without [kv] too) cannot feed it, so the
        copy is shared and the stats say so."""
        if asked.shared:
            return asked
        self.notes.append(
            f"cross-attention policy {asked.describe()!r}: the ONNX step graph reads one "
            "copy per chunk, which its beams share"
        )
        return replace(asked, shared=True)

    def _compute_type(self) -> str:
        wanted = self.settings.get("compute_type", "float32")
        wanted = "float32" if wanted == "default" else wanted
        if wanted not in _COMPUTE_TYPES:
            raise self.bad_compute_type(wanted, _COMPUTE_TYPES)
        return wanted

    def _export(self):
        from kvscribe.backends.onnx import export

        found = export.read(export.export_dir(self.model))
        if found is None or not found.has(self.compute_type):
            raise ModelNotFoundError(
                f"no {self.compute_type} ONNX export of {self.model.name}",
                subject=str(export.export_dir(self.model)),
                hint=_SETUP_HINT,
            )
        return found

    def _provider(self) -> str:
        import onnxruntime

        provider = _PROVIDERS[self.device]
        if provider not in onnxruntime.get_available_providers():
            package = "onnxruntime-gpu" if self.device == "cuda" else "an onnxruntime with it"
            raise BackendUnavailableError(
                f"onnxruntime has no {provider} here",
                subject=self.name,
                hint=f"install {package}, or use --device cpu",
            )
        return provider

    def describe_settings(self) -> dict[str, str]:
        return {
            row.COMPUTE_TYPE: self.compute_type,
            row.EXECUTION_PROVIDER: self._provider(),
            row.SELF_POLICY: self.profile.kv_self,
            row.CROSS_POLICY: self.cross_spec.describe(),
        }

    def decode(self, audio: Samples, request: DecodeRequest) -> Transcription:
        from kvscribe.audio.streamed_mel import StreamedMel
        from kvscribe.stepped import longform

        self._check_request_language(request)
        beams = request.beam_size
        batch = self.batch_size_for(request, audio.size / SAMPLE_RATE)
        if batch > 1:
            return self._transcribe_batched(audio, request, beams, batch)
        mel = StreamedMel(audio, self._front_end())
        language, probability = self._language(request, lambda: mel[:, :FRAMES_PER_WINDOW])
        plan = self._plan(language, request.task, beams, request)
        report = self._report(request, beams)
        prompt = self._prompt_tokens(request)

        def segments():
            stats = longform.WindowStats()
            yield from longform.transcribe(plan, mel, self._text, stats, prompt)
            stats.fill(report)

        return Transcription(language, probability, segments(), report)

    def _transcribe_batched(
        self, audio: Samples, request: DecodeRequest, beams: int, batch: int
    ) -> Transcription:
        """Speech chunks decoded `batch` at a time by the stepped core's batched driver (no
        previous text; times from alignment), as the transformers backend's are; the
        language, unless given, is the first chunk's."""
        from kvscribe.chunking import batched_rules, speech_chunks
        from kvscribe.stepped import batched_inputs, longform

        chunks = speech_chunks(audio, batched_rules(request.vad))
        language, probability = self._chunks_language(audio, chunks, request)
        plan = self._plan(language, request.task, beams, request, timestamps=False)
        batch, budget_note = self._fit_budget(plan, batch)
        hold_history(audio, batch * 30 + 30)  # a group's tails are read again after it
        report = self._batched_report(plan, request, batch, budget_note)
        prompt = self._prompt_tokens(request)

        def segments():
            stats = longform.WindowStats()
            yield from batched_inputs.transcribe(
                plan,
                audio,
                chunks,
                batch,
                self._chunk_mel,
                self._text,
                prompt,
                stats,
                request.word_timestamps,
            )
            stats.fill(report)

        return Transcription(language, probability, segments(), report)

    def _chunks_language(self, audio, chunks, request: DecodeRequest) -> tuple[str, float | None]:
        """The request's language, else the one detected on the first speech chunk (on the
        first window when there is none)."""
        first = chunks[0].samples(audio) if chunks else audio
        return self._language(request, lambda: self._chunk_mel(first))

    def _batched_report(self, plan, request: DecodeRequest, batch: int, budget_note: str):
        report = self._report(request, plan.beams)
        batching = {row.BATCH_SIZE: str(batch) + budget_note, row.PREVIOUS_TEXT: "off (batched)"}
        report.settings.update(batching)
        report.batch_size = batch
        return report

    def _check_request_language(self, request: DecodeRequest) -> None:
        special = self.vocab.special
        self.check_language(request, special.is_multilingual, list(special.languages))

    def _text(self, tokens: list[int]) -> str:
        return self.vocab.text(tokens)

    def _prompt_tokens(self, request: DecodeRequest) -> list[int]:
        return self.vocab.prompt_tokens(request.prompt)

    def shares_batches(self, request: DecodeRequest) -> bool:
        """Short files share batches where a batch's rows have several cores to go to, or a
        GPU, as on ctranslate2. On one thread sharing gained nothing: 0.95-1.09x the time of
        files decoded alone over two runs; on two, 0.95x and 1.01x, with fewer errors
        (benchmarks/results/folder_batches_onnx.md)."""
        from kvscribe.machine.capacity import usable_physical_cores

        threads = self.settings.get("threads") or usable_physical_cores()
        return (self.device != "cpu" or threads > 1) and super().shares_batches(request)

    def _silent_chunk(self):
        """One chunk's cross-attention K/V, all zeros: what a KV size probe decodes."""
        import numpy as np

        from kvscribe.backends.onnx.engine import EncodedChunks

        engine = self.engine
        shape = (1, engine.heads, engine.frames, engine.head_dim)

        def zeros():  # an array of its own each: the store may keep them as they are
            return np.zeros(shape, np.float32)

        return EncodedChunks([(zeros(), zeros()) for _ in range(engine.layers)])

    def _language(self, request: DecodeRequest, first_window) -> tuple[str, float | None]:
        """The request's language (no probability), else the one detected on
        `first_window()`'s log-mel [n_mels, 3000]; English-only models are English."""
        from kvscribe.stepped.language import detect_language

        if request.language is not None:
            return request.language, None
        if not self.vocab.special.is_multilingual:
            return "en", None
        engine = self.engine
        encoded = engine.encode(first_window()[None])
        specs = (self.self_specs, self.cross_spec)
        fill = self._fill_cross
        return detect_language(engine, fill, encoded, self.vocab.special, *specs, None)

    @staticmethod
    def _fill_cross(cross, encoded) -> None:
        cross.fill_projected(encoded)

    def _report(self, request: DecodeRequest, beams: int) -> DecoderReport:
        report = DecoderReport(
            kv_provenance=make_provenance(MEASURED), settings=self._settings(request, beams)
        )
        report.not_applicable += self.notes
        if request.word_timestamps and self.aligner is None:
            report.not_applicable.append("word timestamps: the model names no alignment heads")
        return report

    def _front_end(self):
        from kvscribe.audio.streamed_mel import WhisperNumpyFrontEnd

        return WhisperNumpyFrontEnd(self.n_mels)

    def _chunk_mel(self, samples):
        """A speech chunk's first 30 s window of log-mel [n_mels, 3000] (numpy)."""
        from kvscribe.audio.streamed_mel import StreamedMel

        return StreamedMel(samples, self._front_end())[:, :FRAMES_PER_WINDOW]

    def _plan(
        self,
        language: str,
        task: str,
        beams: int,
        request: DecodeRequest | None = None,
        timestamps: bool = True,
    ):
        """The decoding plan for one input (the transformers backend's signature); without
        `request`, the defaults. `timestamps` False: batched chunks, their words aligned."""
        from kvscribe.decoding import PROMPT_MAX
        from kvscribe.stepped.longform import WindowPlan
        from kvscribe.stepped.rules import TokenRules
        from kvscribe.stepped.search import SearchSetup

        request = self.completed(request or DecodeRequest(task=task))
        engine, special = self.engine, self.vocab.special
        suppressed = self.vocab.suppressed(request.suppress_tokens)
        rules = TokenRules(special, self.vocab_size, suppressed, timestamps=timestamps, device=None)
        return WindowPlan(
            encode=lambda mel: engine.encode(mel if mel.ndim == 3 else mel[None]),
            setup=SearchSetup(engine, rules, special.eot, special.no_speech, None),
            fill_cross=self._fill_cross,
            special=special,
            sot_sequence=self.vocab.sot_sequence(language, task),
            self_specs=self.self_specs,
            cross_spec=self.cross_spec,
            beams=beams,
            condition=request.condition_on_previous_text,
            text_ctx=self.text_ctx,
            kv_bytes_per_position=2 * engine.layers * engine.heads * engine.head_dim * 4,
            fallback=request.fallback,
            hotwords=tuple(self.vocab.prompt_tokens(request.hotwords)[:PROMPT_MAX]),
            max_new_tokens=request.max_new_tokens,
            timestamps=timestamps,
            align_words=self.aligner if request.word_timestamps or not timestamps else None,
        )

    def _aligner(self):
        """Word times from the step graph's alignment-head scores (None for a model whose
        config names no alignment heads: its words are not timed)."""
        from kvscribe.backends.onnx.alignment import onnx_word_aligner

        try:
            return onnx_word_aligner(self.engine, self.vocab.special, self.vocab.text)
        except ValueError:
            return None

    def _settings(self, request: DecodeRequest, beams: int) -> dict[str, str]:
        return {**self.describe_settings(), **decoding_rows(request, beams)}
