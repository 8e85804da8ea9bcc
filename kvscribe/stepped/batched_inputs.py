"""Inputs through the batched search (kvscribe.stepped.batched): one long input's speech
chunks, or several short inputs' side by side (a batch folder's parcel), each group of
chunks encoded and decoded together, the segments cut by kvscribe.aligned_chunks."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from kvscribe import aligned_chunks
from kvscribe.aligned_chunks import AlignedChunk
from kvscribe.chunking import Chunk
from kvscribe.stepped import batched
from kvscribe.stepped.longform import WindowPlan, WindowStats
from kvscribe.types import Segment


def transcribe(
    plan: WindowPlan,
    audio,
    chunks: list[Chunk],
    batch: int,
    chunk_mel: Callable[[Any], Any],
    decode_text: Callable[[list[int]], str],
    prompt: list[int],
    stats: WindowStats,
    word_timestamps: bool,
) -> Iterator[Segment]:
    """Segments of `audio`'s speech `chunks`, decoded `batch` at a time; `chunk_mel`: a
    chunk's samples -> its first 30 s log-mel [n_mels, 3000] in the engine's arrays;
    `prompt`: the user's prompt tokens (full_prompt makes every chunk's decoder prompt)."""
    decode_group = group_decoder(plan, (audio,), chunk_mel, decode_text, prompt, stats)
    yield from aligned_chunks.decoded_segments(
        chunks,
        batch,
        decode_group,
        decode_text,
        plan.fallback,
        word_timestamps,
        unread=stats.unread.append,
    )


def transcribe_shared(
    plan: WindowPlan,
    audios: Sequence,
    chunked: list[list[Chunk]],
    batch: int,
    chunk_mel: Callable[[Any], Any],
    decode_text: Callable[[list[int]], str],
    prompt: list[int],
    reports: list,
    word_timestamps: bool,
) -> list[list[Segment]]:
    """Short inputs decoded side by side: `chunked[i]` holds the speech chunks of one of
    `audios` (`source`: its number there), one run each, in order, so an input's chunks fill
    the rows the one before left (kvscribe.aligned_chunks.shared_segments). Per run: its
    segments as a decode of it alone numbers them; `reports[i]` (its DecoderReport) gets its
    windows, kept tokens and speech left unread, the batch's KV bytes (a run reports the
    largest), and the batch's timings on the first report only (a run's totals add its
    inputs' up)."""
    stats = WindowStats()
    decode_group = group_decoder(plan, audios, chunk_mel, decode_text, prompt, stats)
    counts = {run[0].source: [0, 0] for run in chunked if run}

    def seen(source: int, result: AlignedChunk) -> None:
        counts[source][0] += 1
        counts[source][1] += len(result.tokens)

    chunks = [chunk for run in chunked for chunk in run]
    report_of = {run[0].source: report for run, report in zip(chunked, reports, strict=True) if run}
    segments = aligned_chunks.shared_segments(
        chunks,
        len(audios),
        batch,
        decode_group,
        decode_text,
        plan.fallback,
        word_timestamps,
        seen,
        lambda part: report_of[part.source].left_unread(part),
    )
    for index, (run, report) in enumerate(zip(chunked, reports, strict=True)):
        stats.fill(report)
        report.windows, report.tokens = counts[run[0].source] if run else (0, 0)
        if index:
            report.encoder_seconds, report.step_seconds, report.recompute_macs = 0.0, [], 0
    return [segments[run[0].source] if run else [] for run in chunked]


def group_decoder(plan, audios: Sequence, chunk_mel, decode_text, prompt, stats):
    """The batched driver's `decode_group`: a group of chunks (each of
    `audios[chunk.source]`) encoded and decoded together, every chunk from the same
    decoder prompt (a first round of rereads is read after the group: `_rereads` unused)."""
    decoder_prompt = batched.full_prompt(plan, prompt)

    def decode_group(group: list[Chunk], _rereads: object = None) -> list[AlignedChunk]:
        mels = [chunk_mel(chunk.samples(audios[chunk.source])) for chunk in group]
        return batched.decode_with_fallback(plan, group, mels, decoder_prompt, stats, decode_text)

    return decode_group
