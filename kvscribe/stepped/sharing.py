"""Short inputs sharing batches on the engines kvscribe steps itself (transformers, onnx):
`Backend.transcribe_together` written once for both, over
kvscribe.stepped.batched_inputs.transcribe_shared.

A backend that mixes this in provides what its batched path already has: `_plan`
(timestamps off for chunks), `_silent_chunk`, `_chunk_mel`, `_text`, `_prompt_tokens`,
`_chunks_language`, `_batched_report`, `_check_request_language`, its profile section's
`settings` and a `_chunk_bytes` dict. Here too: how a batch fits the profile's KV budget,
and what one row reserves in a server's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvscribe import setting_rows as row
from kvscribe.audio.stream import Samples
from kvscribe.chunking import shared_by_language
from kvscribe.contract import DecodeRequest, Transcription
from kvscribe.provenance import MEASURED


class SharesSteppedBatches:
    def decode_together(
        self, audios: Sequence[Samples], request: DecodeRequest
    ) -> list[Transcription]:
        """Short inputs (each within one window) decoded side by side, as the speech chunks
        of a long file are: each input's chunks are one run, the runs of inputs in the same
        language share the batches. Decoded before this returns: an input's batch holds the
        others' chunks."""
        self._check_request_language(request)
        return shared_by_language(
            audios,
            request,
            self._chunks_language,
            lambda language, runs: self._shared_run(language, request, audios, runs),
        )

    def _shared_run(self, language: str, request: DecodeRequest, audios, runs):
        """(segments, report) of each input whose chunks are `runs` (one language)."""
        from kvscribe.stepped import batched_inputs

        beams = request.beam_size
        plan = self._plan(language, request.task, beams, request, timestamps=False)
        size, budget_note = self._fit_budget(plan, self.batch_size_for(request, math.inf))
        reports = [self._batched_report(plan, request, size, budget_note) for _ in runs]
        for report in reports:
            report.settings[row.BATCH_SIZE] += " (short files share them)"
        segments = batched_inputs.transcribe_shared(
            plan,
            audios,
            runs,
            size,
            self._chunk_mel,
            self._text,
            self._prompt_tokens(request),
            reports,
            request.word_timestamps,
        )
        return list(zip(segments, reports, strict=True))

    def _fit_budget(self, plan, wanted: int) -> tuple[int, str]:
        """The batch that fits the profile's `kv_budget_mb`, and how it was chosen."""
        from kvscribe.stepped.batched import budgeted_batch

        budget_mb = self.settings.get("kv_budget_mb")
        return budgeted_batch(plan, wanted, budget_mb, self._silent_chunk, self._chunk_bytes)

    def kv_row_bytes(self, request: DecodeRequest) -> tuple[int, str]:
        """One chunk's KV storage under the request's beams and the profile's policies,
        measured from what a probe's caches hold (kvscribe.stepped.batched.bytes_per_chunk;
        the language changes no size)."""
        from kvscribe.stepped.batched import measured_chunk_bytes

        request = self.completed(request)
        plan = self._plan("en", request.task, request.beam_size, request, timestamps=False)
        return measured_chunk_bytes(plan, self._silent_chunk, self._chunk_bytes), MEASURED
