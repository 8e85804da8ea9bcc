"""Which of a file's speech chunks are decoded together, round after round, and the text
before each that a chunk's decode is prompted with.

Chunks decoded in one batch cannot be prompted with each other's text, where a sequential
decoder prompts every window with the text before it (on a Spanish telephone recording
the batch made a quarter more errors than `--batch-size 1`, which keeps the prompts, and
on the English ones the lanes below cut the errors by up to a seventh: docs/long-files.md,
"Lanes: prompted chunks"). A file of more chunks than a batch holds takes several rounds
anyway. Dealt out in order, each round held consecutive chunks, none of them prompted.
Dealt into lanes (`in_lanes`: each lane a run of consecutive chunks, one of them per
round, the lanes side by side), every chunk but a lane's first follows a chunk decoded in
an earlier round and is prompted with its text, in as many rounds as in order, none of
them wider than a batch. The lanes are dealt a span of at most `batch * SPAN_ROUNDS`
chunks at a time, so a streamed file is read at most `history_seconds(batch)` behind.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kvscribe.chunking import MAX_SECONDS, Chunk
from kvscribe.decoding import PROMPT_MAX, PROMPT_RESET_TEMPERATURE
from kvscribe.types import Segment

SPAN_ROUNDS = 3  # rounds a span of lanes takes at most (a third of its chunks unprompted)


def in_order(count: int, batch: int) -> list[list[int]]:
    """Chunk numbers `batch` at a time, in order (inputs sharing batches, engines that
    take no prompt per row)."""
    return [list(range(first, min(first + batch, count))) for first in range(0, count, batch)]


def in_lanes(count: int, batch: int) -> list[list[int]]:
    """Chunk numbers round by round: each span of `batch * SPAN_ROUNDS` chunks is cut into
    lanes of `depth` consecutive chunks (as few rounds as in order), round r holding each
    lane's r-th chunk. 11 chunks at batch 8: rounds [0, 2, 4, 6, 8, 10] and [1, 3, 5, 7, 9]."""
    rounds = []
    span = batch * SPAN_ROUNDS
    for first in range(0, count, span):
        size = min(span, count - first)
        depth = math.ceil(size / batch)
        lanes = [
            range(start, min(start + depth, first + size))
            for start in range(first, first + size, depth)
        ]
        rounds += [[lane[r] for lane in lanes if r < len(lane)] for r in range(depth)]
    return rounds


def history_seconds(batch: int) -> float:
    """How far behind its latest read a span's rounds (and their tails) read a file."""
    return (batch * SPAN_ROUNDS + 1) * MAX_SECONDS


def text_before(index: int, chunks: Sequence[Chunk], found: dict[int, list[Segment]]) -> list[int]:
    """The previous-text prompt of chunk `index`: the tokens of the segments decoded right
    before it (chunks of the same input, back to the first one not decoded yet), at most
    PROMPT_MAX, and none from before a segment decoded above PROMPT_RESET_TEMPERATURE
    (faster-whisper's rules). A chunk judged silent has no segments and adds nothing."""
    tokens: list[int] = []
    source = chunks[index].source
    before = index - 1
    while before in found and chunks[before].source == source and len(tokens) < PROMPT_MAX:
        for segment in reversed(found[before]):
            if (segment.temperature or 0.0) > PROMPT_RESET_TEMPERATURE:
                return tokens[-PROMPT_MAX:]
            tokens[:0] = segment.tokens
        before -= 1
    return tokens[-PROMPT_MAX:]
