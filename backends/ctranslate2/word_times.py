"""A batch's word times on CTranslate2: each decoded row's text aligned to its audio by
cross-attention (CTranslate2's `align`, as faster-whisper's word timestamps use), a call per
row on a CPU, its words put back on the original clock (kvscribe.aligned_chunks)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvscribe.adapters import faster_whisper as adapter
from kvscribe.aligned_chunks import AlignedChunk, on_original_clock
from kvscribe.audio.mel import FRAMES_PER_SECOND, FRAMES_PER_WINDOW
from kvscribe.backends.ctranslate2.group_encoding import EncodedRows, SpreadRows
from kvscribe.backends.ctranslate2.replicas import rows_of
from kvscribe.chunking import Chunk
from kvscribe.timing.timed_words import TimedWord

if TYPE_CHECKING:
    from kvscribe.backends.ctranslate2.batched import BatchSetup

MEDIAN_FILTER_WIDTH = 7  # openai-whisper's smoothing of the alignment heads' weights


def aligned(
    plan: BatchSetup, encoded, group: list[Chunk], decoded: list[AlignedChunk]
) -> list[AlignedChunk]:
    """Each spoken chunk's words, timed by cross-attention alignment (`_alignments`),
    punctuation glued to its word as faster-whisper glues it."""
    rows = [row for row, result in enumerate(decoded) if alignable(plan, result)]
    if not rows:
        return decoded
    alignments = _alignments(
        plan,
        encoded if len(rows) == len(group) else rows_of(encoded, rows),
        [decoded[row].tokens for row in rows],
        [_frames(group[row]) for row in rows],
    )
    aligned = list(decoded)
    for row, alignment in zip(rows, alignments, strict=True):
        aligned[row] = with_words(decoded[row], alignment, group[row])
    return aligned


def align_row(
    plan: BatchSetup,
    encoded: EncodedRows | SpreadRows,
    group: list[Chunk],
    row: int,
    result: AlignedChunk,
) -> AlignedChunk:
    """One row's words, aligned on a replica (a call of its own, as `_alignments` aligns
    each row on a CPU)."""
    (alignment,) = adapter.align(
        plan.replicas.engine,
        plan.tokenizer,
        [result.tokens],
        encoded.of([row]),
        [_frames(group[row])],
        MEDIAN_FILTER_WIDTH,
    )
    return with_words(result, alignment, group[row])


def alignable(plan: BatchSetup, result: AlignedChunk) -> bool:
    """A row with text that is not the fallback's silence."""
    silence = plan.fallback.is_silence(result.no_speech_prob, result.avg_logprob)
    return bool(result.tokens) and not silence


def _frames(chunk: Chunk) -> int:
    return min(FRAMES_PER_WINDOW, round(chunk.seconds * FRAMES_PER_SECOND))


def with_words(result: AlignedChunk, alignment: list[dict], chunk: Chunk) -> AlignedChunk:
    adapter.merge_punctuations(alignment)
    words = [_timed(word) for word in alignment if word["word"]]
    return replace(result, words=on_original_clock(words, chunk))


def _alignments(plan: BatchSetup, encoded, tokens: list[list[int]], frames: list[int]) -> list:
    """CTranslate2's alignment of each row, the rows shared out over the replicas. On a CPU
    each row is aligned in a call of its own: a call of several rows pads them all to the
    longest text and filters and aligns the padding too (tiny.en, 4 rows of 13-73 tokens on
    one thread: 0.28-0.34 s together, 0.15-0.18 s one at a time)."""
    replicas = plan.replicas
    alone = encoded.device == "cpu"

    def align(engine, share: list[int]) -> list:
        calls = [[row] for row in share] if alone else [share]
        found = []
        for rows in calls:
            found += adapter.align(
                engine,
                plan.tokenizer,
                [tokens[row] for row in rows],
                encoded if len(rows) == len(tokens) else rows_of(encoded, rows),
                [frames[row] for row in rows],
                MEDIAN_FILTER_WIDTH,
            )
        return found

    if not replicas.split(len(tokens)):
        return align(plan.engine, list(range(len(tokens))))
    weights = [len(row) for row in tokens]  # the work: tokens
    return replicas.over_rows(lambda share: align(replicas.engine, share), len(tokens), weights)


def _timed(word: dict) -> TimedWord:
    return TimedWord(
        float(word["start"]),
        float(word["end"]),
        word["word"],
        float(word["probability"]),
        tuple(word["tokens"]),
    )
