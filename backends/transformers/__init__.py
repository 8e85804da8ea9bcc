"""transformers backend: PyTorch Whisper whose decoder KV cache follows the profile's policy.

The weights are a transformers Whisper checkpoint (converted once from the embedded
CTranslate2 model when needed), loaded into plain torch modules with transformers' names
(backends/transformers/network.py: importing transformers itself would cost each run 1.5 s). The
encoder repeats transformers' own; decoding runs the decoder's modules through kvscribe's
per-layer cache (backends/transformers/decoder.py says why not through transformers' generate()).
This module chooses and reports; the torch work is backends/transformers/engine.py's.

The audio is read in slices, never whole (a file arrives as a StreamedAudio): the
sequential path's log-mel is a StreamedMel, computed one 30 s window at a time and equal
to the whole-file features; the batched path computes each speech chunk's own, and keeps
a group of chunks' audio decoded while their unfinished tails are decoded again.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvscribe import setting_rows as row
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Samples, hold_history
from kvscribe.backends.base import Backend
from kvscribe.contract import Capabilities, DecodeRequest, DecoderReport, Transcription
from kvscribe.errors import BackendUnavailableError, ModelNotFoundError
from kvscribe.kvcache.spec import parse_cross
from kvscribe.machine import hardware
from kvscribe.provenance import MEASURED, make_provenance
from kvscribe.stepped.sharing import SharesSteppedBatches

_SETTINGS = {
    "beam_size": int,
    "condition_on_previous_text": bool,
    "threads": int,
    "batch_size": int,
    "compute_type": str,
    "kv_budget_mb": int,
}
# default: float16 on a GPU; on a CPU bfloat16 where it multiplies bfloat16 matrices in
# hardware (Intel AMX: 0.57-0.61x float32's time, WER within 0.003 either way,
# benchmarks/results/transformers_bf16.md), else float32. "int8": the linear layers'
# weights in int8, activations quantised per call (CPU only). "float16": a GPU's default,
# named (a CPU runs it too, slowly).
_COMPUTE_TYPES = ("default", "float32", "float16", "bfloat16", "int8")
_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16", "int8": "float32"}


class TransformersBackend(SharesSteppedBatches, Backend):
    name = "transformers"
    summary = "PyTorch + transformers with kvscribe's KV-cache policies"
    capabilities = Capabilities(
        model_formats=("transformers",),
        devices=("cpu", "cuda", "mps"),
        kv_controls=(
            "window",
            "sink",
            "half",
            "q8_0",
            "q4_0",
            "cross shared",
            "cross q8_0",
            "beam size",
        ),
        batched=True,
        streams_audio=True,
        batched_cuts_pauses=True,
        shares_batches=True,
        # One worker sharing batches on both cores took 0.71-0.79x the time of two one-core
        # workers, which each import torch (benchmarks/results/folder_batches_transformers.md).
        worker_per_core=False,
        honours=frozenset({"hotwords", "max_new_tokens", "suppress_tokens"}),
    )

    requires = ("torch", "safetensors", "tokenizers")
    settings_schema = _SETTINGS
    install_hint = "pip install 'kvscribe[transformers]'"

    def load(self) -> None:
        import torch

        from kvscribe.backends.transformers import network, weights
        from kvscribe.backends.transformers.engine import TorchWhisper
        from kvscribe.stepped.vocabulary import Vocabulary

        self.settings = self.profile_settings(_SETTINGS)
        present = {"cuda": torch.cuda.is_available, "mps": torch.backends.mps.is_available}
        if self.device in present and not present[self.device]():
            raise BackendUnavailableError(
                f"no {self.device.upper()} device found",
                subject=self.name,
                hint="use --device cpu or --profile cpu-laptop",
            )
        self.threads = self._threads()
        torch.set_num_threads(self.threads)
        self.compute_type = self._compute_type()
        self.dtype = getattr(torch, _DTYPES[self.compute_type])
        self.network = self._load_network(network)
        if self.device == "cpu":
            weights.relayout_vocab_projection(self.network)
        if self.compute_type == "int8":
            weights.int8_linear_layers(self.network)
        self.vocab = Vocabulary(self.model.path)
        self.special = self.vocab.special
        layers = self.network.config.decoder_layers
        self.self_specs = self.profile.self_specs(layers)
        self.cross_spec = parse_cross(self.profile.kv_cross)
        self.engine = TorchWhisper(
            self.network, self.vocab, self.device, self.dtype, self.self_specs, self.cross_spec
        )
        self._chunk_bytes: dict = {}  # (beams, policies) -> KV bytes one chunk holds

    def _load_network(self, network):
        from safetensors import SafetensorError

        try:
            return network.load(self.model.path, self.dtype, self.device)
        except (OSError, ValueError, KeyError, SafetensorError) as error:
            raise ModelNotFoundError(
                f"not a loadable Whisper checkpoint: {error}",
                subject=str(self.model.path),
                hint="give --model a transformers Whisper folder (config.json, model.safetensors)",
            ) from error

    def _threads(self) -> int:
        """The profile's `threads`, else OMP_NUM_THREADS (a batch worker's share), else the
        physical cores this process may use: torch's own default, worked out here because
        the live value may already be another engine's."""
        from kvscribe.machine.capacity import usable_physical_cores

        return int(self.settings.get("threads") or usable_physical_cores())

    def describe_settings(self) -> dict[str, str]:
        return {
            row.DTYPE: str(self.dtype).removeprefix("torch."),
            row.THREADS: str(self.threads),
            row.COMPUTE_TYPE: self.compute_type,
            row.SELF_POLICY: self.profile.kv_self,
            row.CROSS_POLICY: self.cross_spec.describe(),
            row.PREVIOUS_TEXT: "on" if self.profile_conditions() else "off",
        }

    def _compute_type(self) -> str:
        wanted = self.settings.get("compute_type", "default")
        if wanted not in _COMPUTE_TYPES:
            raise self.bad_compute_type(wanted, _COMPUTE_TYPES)
        on_cpu = self.device == "cpu"
        if wanted == "default":
            if not on_cpu:
                return "float16"
            return "bfloat16" if hardware.cpu_multiplies_bfloat16() else "float32"
        if wanted == "int8" and not on_cpu:  # torch's int8 linear kernels are CPU-only
            return "float16"
        return wanted

    def _request_settings(self, request: DecodeRequest, beams: int) -> dict[str, str]:
        from kvscribe.stepped.request import decoding_rows

        return {**self.describe_settings(), **decoding_rows(request, beams)}

    def decode(self, audio: Samples, request: DecodeRequest) -> Transcription:
        import torch

        from kvscribe.audio.streamed_mel import StreamedMel, TorchFrontEnd

        # OpenMP's thread count is the process's: a CTranslate2 model built since (a
        # replica sets it to 1) would otherwise decide ours, for every later decode.
        torch.set_num_threads(self.threads)
        self._check_request_language(request)
        beams = request.beam_size
        batch = self.batch_size_for(request, audio.size / SAMPLE_RATE)
        if batch > 1:
            return self._transcribe_batched(audio, request, beams, batch)
        # The whole input's features, computed a window at a time as the decoder reads them.
        mel = StreamedMel(audio, TorchFrontEnd(self.network.config.num_mel_bins, self.device))
        language, probability = self._language(request, mel)
        plan = self._plan(language, request.task, beams, request)
        report = DecoderReport(
            kv_provenance=make_provenance(MEASURED),  # read from the cache's own tensors
            settings=self._request_settings(request, beams),
        )
        self._note_words(report, plan, request)
        prompt = self._prompt_tokens(request)
        stream = self._stream(plan, mel, report, prompt)
        return Transcription(language, probability, stream, report)

    def _language(self, request: DecodeRequest, mel) -> tuple[str, float | None]:
        """The request's language (no probability), else the one detected on `mel`'s first
        window; English-only models are English with no probability to report."""
        if request.language is not None:
            return request.language, None
        if not self.special.is_multilingual:
            return "en", None
        return self.engine.detect_language(mel)

    def _prompt_tokens(self, request: DecodeRequest) -> list[int]:
        return self.vocab.prompt_tokens(request.prompt)

    def _transcribe_batched(
        self, audio: Samples, request: DecodeRequest, beams: int, batch: int
    ) -> Transcription:
        from kvscribe.chunking import batched_rules, speech_chunks

        chunks = speech_chunks(audio, batched_rules(request.vad))
        language, probability = self._chunks_language(audio, chunks, request)
        plan = self._plan(language, request.task, beams, request, timestamps=False)
        batch, budget_note = self._fit_budget(plan, batch)
        # A group's unfinished tails are read again after its last chunk: keep them decoded.
        hold_history(audio, batch * 30 + 30)
        report = self._batched_report(plan, request, batch, budget_note)
        stream = self._stream_batched(plan, audio, chunks, batch, report, request)
        return Transcription(language, probability, stream, report)

    def decode_together(
        self, audios: Sequence[Samples], request: DecodeRequest
    ) -> list[Transcription]:
        import torch

        torch.set_num_threads(self.threads)  # as transcribe() does, and for the same reason
        return super().decode_together(audios, request)

    def _check_request_language(self, request: DecodeRequest) -> None:
        self.check_language(request, self.special.is_multilingual, list(self.special.languages))

    def _chunks_language(self, audio, chunks, request: DecodeRequest) -> tuple[str, float | None]:
        """The request's language, else the one detected on the first speech chunk (English
        for an English-only model, or with no speech to detect it from: no probability)."""
        if request.language is not None or not self.special.is_multilingual or not chunks:
            return request.language or "en", None
        return self.engine.detect_language(self._chunk_mel(chunks[0].samples(audio)))

    def _batched_report(
        self, plan, request: DecodeRequest, batch: int, budget_note: str
    ) -> DecoderReport:
        report = DecoderReport(
            kv_provenance=make_provenance(MEASURED),
            settings={
                **self._request_settings(request, plan.beams),
                row.BATCH_SIZE: str(batch) + budget_note,
                row.PREVIOUS_TEXT: "off (batched)",
            },
            batch_size=batch,
        )
        self._note_words(report, plan, request)
        return report

    @staticmethod
    def _note_words(report: DecoderReport, plan, request: DecodeRequest) -> None:
        if request.word_timestamps and plan.align_words is None:
            report.not_applicable.append(
                "word timestamps: no aligner in this install (backends/transformers/alignment.py)"
            )

    def _silent_chunk(self):
        return self.engine.silent_chunk()

    def _chunk_mel(self, samples):
        return self.engine.chunk_mel(samples)

    def _stream_batched(self, plan, audio, chunks, batch, report, request: DecodeRequest):
        from kvscribe.stepped import batched_inputs, longform

        stats = longform.WindowStats()
        prompt = self._prompt_tokens(request)
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

    def _stream(self, plan, mel, report: DecoderReport, prompt: list[int]):
        from kvscribe.stepped import longform

        stats = longform.WindowStats()
        yield from longform.transcribe(plan, mel, self._text, stats, prompt)
        stats.fill(report)

    def _text(self, tokens: list[int]) -> str:
        return self.vocab.text(tokens)

    def _plan(
        self,
        language: str,
        task: str,
        beams: int,
        request: DecodeRequest | None = None,
        timestamps: bool = True,
    ):
        """The decoding plan for one input; `request` adds its fallback, conditioning and
        word timestamps (None: the defaults, for callers that decode chunks themselves).
        `timestamps` False: batched chunks, decoded without them and every word aligned."""
        request = self.completed(request or DecodeRequest(task=task))
        condition = request.condition_on_previous_text
        return self.engine.plan(language, task, beams, request, timestamps, condition)
