"""Speech a batched chunk's decode skipped, read again: the stretches its words leave
uncovered (before its first word, between two, after its last), joined into as few
windows as hold them and decoded in rounds after the chunk's own decode, each piece put
back after its chunk (kvscribe.aligned_chunks orders their segments in time).
Whisper ends a window early, or starts it late, without saying so; a sequential decoder
seeks and decodes again, and so must a batch of chunks, or those words are lost."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator

from kvscribe.audio import SAMPLE_RATE
from kvscribe.chunking import MAX_SECONDS, Chunk, ChunkResult

# Seconds of skipped speech worth decoding again: five words at a fast speaking rate (200
# a minute), the shortest loss the project counts. On 19 recordings (telephone dev, holdout
# and reordered in English, French and Spanish; the espeak and joined real ones) all 16
# stretches of 1.0-1.4 s came back empty, as an echo, or as words not said ("distrait.",
# "y todo."), each at the cost of a whole encoder window; the 4 that held lost words were
# 2.0-6.2 s (docs/long-files.md, benchmarks/results/reread_stretches.md).
MIN_UNFINISHED = 1.5
MAX_TAIL_ROUNDS = 3  # a chunk is decoded at most this many times more


def unfinished(chunk: Chunk, result: ChunkResult) -> Chunk | None:
    """The part of `chunk` after the decoder stopped, when speech goes on there.

    Whisper sometimes ends a window early (without timestamps, when a new voice or topic
    starts mid-window); a sequential decoder seeks there and decodes again, and so must a
    chunk, or those words are lost. A chunk the request's silence rule judged silent has
    no text, so nothing of it is decoded again."""
    if not result.tokens:
        return None
    stopped = result.stopped_at(chunk)
    if stopped is None or chunk.speech_end - stopped < MIN_UNFINISHED * SAMPLE_RATE:
        return None
    return chunk.after(stopped)


def uncovered(chunk: Chunk, result: ChunkResult) -> list[Chunk]:
    """The parts of `chunk` whose speech the decoded text skipped, each to decode again: before
    its first word, between two words, and after its last (`unfinished`).

    Whisper also starts a window late: a chunk cut just before a phrase can come back
    without it, its text starting with the next one (a 6.6 s prompt of a Spanish telephone
    recording). Only stretches of at least MIN_UNFINISHED seconds of decoded audio count:
    the pad around speech and a word's alignment slack are shorter."""
    if not result.tokens:
        return []
    spans = result.word_spans()
    gaps = [(chunk.start, spans[0][0])] if spans else []
    gaps += [(a, b) for (_, a), (b, _) in itertools.pairwise(spans)]
    enough = MIN_UNFINISHED * SAMPLE_RATE
    parts = [chunk.between(a, b) for a, b in gaps if chunk.decoded_within(a, b) >= enough]
    tail = unfinished(chunk, result)
    return parts + ([tail] if tail is not None else [])


def decode_chunks(
    chunks: list[Chunk],
    rounds: list[list[int]],
    decode_group: Callable[..., list[ChunkResult]],
    unread: Callable[[Chunk], None] = lambda part: None,
    previous: Callable[[list[int]], list[list[int]]] | None = None,
) -> Iterator[tuple[int, list[tuple[Chunk, ChunkResult]]]]:
    """(chunk number, its pieces) round by round (`rounds`: the chunk numbers each decoder
    call takes, kvscribe.chunk_rounds), a round's in its order. A chunk's pieces are
    (chunk, result), then the parts of it its decode skipped, decoded (together with the
    round's others, again while decodes skip speech, each round on shorter parts) before
    the round is yielded, each as (part, result).
    `decode_group(group, rereads)` may read a first round early (FirstRereads);
    `decode_group(chunks)` reads a round's packs. With `previous`, a round's chunks are
    prompted: `decode_group(group, rereads, previous=previous(numbers))`, asked once the
    rounds before are yielded. `unread` hears each stretch still skipped after the last
    round (its words are missing from the text: a report says so, nothing is lost
    silently)."""
    for numbers in rounds:
        group = [chunks[number] for number in numbers]
        rereads = FirstRereads(group)
        left: list[Chunk] = []
        if previous is None:
            results = decode_group(group, rereads)
        else:
            results = decode_group(group, rereads, previous=previous(numbers))
        decoded = _with_tails(group, results, decode_group, rereads, left)
        for part in left:
            unread(part)
        yield from zip(numbers, decoded, strict=True)


class FirstRereads:
    """The first round of a group's rereads, which an engine may read while the rest of the
    group still decodes: once some rows' results are final (a replica's share, decoded and
    aligned), `claim(rows, results)` packs those rows' skipped stretches (`packed`, those
    rows alone) and gives the packs' chunks to decode, and `read(chunk, result)` hands each
    decode back. `_with_tails` takes those and reads the unclaimed rows' stretches as it
    always did. Which rows are packed together depends only on which rows are claimed
    together, never on timing, so the text is the same from run to run."""

    def __init__(self, group: list[Chunk]):
        self._group = group
        self._lock = threading.Lock()
        self._claimed: set[int] = set()
        self._packs: list[Pack] = []
        self._read: dict[Chunk, ChunkResult] = {}

    def claim(self, rows: list[int], results: list[ChunkResult]) -> list[Chunk]:
        parts = [
            (row, part)
            for row, result in zip(rows, results, strict=True)
            for part in uncovered(self._group[row], result)
        ]
        packs = packed(parts)
        with self._lock:
            self._claimed.update(rows)
            self._packs += packs
        return [chunk for _, chunk in packs]

    def read(self, chunk: Chunk, result: ChunkResult) -> None:
        with self._lock:
            self._read[chunk] = result

    def claimed(self, row: int) -> bool:
        return row in self._claimed

    def taken(self) -> tuple[list[Pack], list[ChunkResult]]:
        """The claimed packs and their decodes (every claimed pack is read before the
        group's decode returns)."""
        return self._packs, [self._read[chunk] for _, chunk in self._packs]


def _with_tails(
    group, results, decode_group, early: FirstRereads, left: list[Chunk]
) -> list[list[tuple]]:
    """Per chunk of `group`: its (chunk, result) pieces, the parts it skipped decoded again
    after it (each round looks for skipped speech in the last round's decodes, on shorter
    parts each time, the round's parts packed into as few chunks as hold them: `packed`;
    the first round's claimed rows were packed and read early: `early`;
    kvscribe.aligned_chunks puts their segments in time order). The stretches of
    a pack after where its decode stopped are read again in the next round, alone (a
    pack that said nothing was judged silent, as a chunk is: `unfinished`). What is still
    skipped after MAX_TAIL_ROUNDS rounds goes to `left`."""
    decoded = [[(chunk, result)] for chunk, result in zip(group, results, strict=True)]
    fresh = [(i, *pair) for i, pair in enumerate(zip(group, results, strict=True))]
    around = {}  # each part: the decode it is a gap of
    unread: list[tuple[int, Chunk]] = []
    for round_ in range(MAX_TAIL_ROUNDS):
        parts = []
        for i, chunk, result in fresh:
            for part in uncovered(chunk, result):
                around[part] = result
                if not (round_ == 0 and early.claimed(i)):
                    parts.append((i, part))
        packs = packed(parts) + [([member], member[1]) for member in unread]
        results = decode_group([chunk for _, chunk in packs]) if packs else []
        if round_ == 0:
            read_early, results_early = early.taken()
            packs, results = read_early + packs, results_early + results
        if not packs:
            break
        fresh, unread = [], []
        for (members, joined), result in zip(packs, results, strict=True):
            stopped = result.stopped_at(joined) if len(members) > 1 else None
            for i, part in members:
                if stopped is not None and part.start >= stopped:
                    unread.append((i, part))  # the decode stopped before this stretch
                    continue
                piece = result if len(members) == 1 else result.within(part)
                piece = piece.without_echoes(part, around[part]).plausible_part()
                if piece is not None:
                    decoded[i].append((part, piece))
                    fresh.append((i, part, piece))
    left += [part for _, chunk, result in fresh for part in uncovered(chunk, result)]
    left += [part for _, part in unread]
    return decoded


Pack = tuple[list[tuple[int, Chunk]], Chunk]  # (chunk number, stretch) members, joined chunk


def packed(parts: list[tuple[int, Chunk]]) -> list[Pack]:
    """Stretches to read again (each with its chunk's number), joined end to end, an input's
    in time order, into as few chunks of at most MAX_SECONDS of audio as hold them: alone,
    a stretch of a second or two is padded to a whole window, and each costs the encoder
    one (the French telephone recording: 4 stretches of 1-3 s, 0.9 s of its 6 s). The
    decode of a pack is shared back out by time (ChunkResult.within)."""
    limit = MAX_SECONDS * SAMPLE_RATE
    packs: list[list[tuple[int, Chunk]]] = []
    for member in sorted(parts, key=lambda member: (member[1].source, member[1].start)):
        last = packs[-1] if packs else None
        same_input = last is not None and last[-1][1].source == member[1].source
        seconds = sum(part.seconds for _, part in last) if last else 0.0
        if same_input and (seconds + member[1].seconds) * SAMPLE_RATE <= limit:
            last.append(member)
        else:
            packs.append([member])
    return [(members, _joined_parts([part for _, part in members])) for members in packs]


def _joined_parts(parts: list[Chunk]) -> Chunk:
    if len(parts) == 1:
        return parts[0]
    spans = tuple(span for part in parts for span in part.spans)
    return Chunk(parts[0].start, parts[-1].end, parts[-1].speech_end, spans, parts[0].source, True)
