"""A batched chunk's decode, timed by alignment, and the segments it gives: written once for
every engine that decodes speech chunks side by side (backends/ctranslate2/batched.py,
kvscribe/stepped/batched.py).

Several short files can share the batches (`shared_segments`: each file a run of chunks).

A chunk is decoded without timestamp tokens (with them the model skips speech between one
timestamp and the next, docs/long-files.md); its words are timed by cross-attention
alignment (CTranslate2's `align`, the transformers backend's DTW) on the chunk's own clock,
tidied, and put back on the original clock through the chunk's time map;
kvscribe.timing.timed_words cuts them into segments.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from kvscribe import chunk_rounds
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.mel import FRAMES_PER_SECOND
from kvscribe.chunking import Chunk, ChunkResult
from kvscribe.decoding import Fallback, unspoken
from kvscribe.rereads import decode_chunks
from kvscribe.timing.timed_words import (
    TimedWord,
    is_anomalous,
    is_spoken,
    is_squeezed,
    is_stretched_over_unread_speech,
    split_segments,
    tidy,
)
from kvscribe.timing.words import normalized
from kvscribe.types import Segment, Word


@dataclass(frozen=True)
class AlignedChunk(ChunkResult):
    """A chunk's accepted decode (text tokens only), with what fallback and alignment add."""

    temperature: float = 0.0
    compression_ratio: float = 0.0
    words: tuple[TimedWord, ...] = ()  # aligned, on the original clock
    # The decode stopped at its token bound (--max-new-tokens, the window's, or what its
    # audio can hold: kvscribe.decoding.tokens_heard), not at end of text: its words end
    # where the bound fell, and the alignment spreads them over speech the decoder never
    # read, so they cannot say what it skipped.
    cut_short: bool = False
    prompt_length: int = 0  # the decoder prompt's tokens (previous text, sot sequence); 0: not kept

    def plausible_part(self) -> AlignedChunk | None:
        """The decode from its first word on which openai-whisper's word anomaly test (over
        the first words: too short to be spoken, too long, or unlikely) passes; None when
        no word is left, or the rest is squeezed past any speaking rate. A tail of a second
        or two decoded again can come back as a remembered sentence, which fails it
        throughout; a stretch read again from inside a word starts with a word or two that
        fail it alone: on a Spanish telephone recording "el siete o nueve para bajar ..."
        (p 0.07 and 0.08, the second aligned 0 s long), which thrown away whole lost the
        nine words after them (docs/long-files.md). At most EDGE_WORDS are dropped so: a
        decode that still fails is made up (a looping decode of noise can pass once a
        few of its words are gone). A decode of punctuation alone ("..." for a stretch of
        noise) says nothing heard: None."""
        if not any(is_spoken(word) for word in self.words):
            return None
        words = list(self.words)
        for _ in range(EDGE_WORDS):
            if not words or not is_anomalous(words):
                break
            words.pop(0)
        if not words or is_anomalous(words) or is_squeezed(words):
            return None
        if len(words) == len(self.words):
            return self
        return replace(self, tokens=[t for w in words for t in w.tokens], words=tuple(words))

    def stopped_at(self, chunk: Chunk) -> int | None:
        """Where the last word kept ends: the decode has no timestamp to say it."""
        kept = self.kept_words()
        if not kept:
            return None
        return round(kept[-1].end * SAMPLE_RATE)

    def word_spans(self) -> list[tuple[int, int]]:
        if self.cut_short:
            return []
        return [
            (round(w.start * SAMPLE_RATE), round(w.end * SAMPLE_RATE)) for w in self.kept_words()
        ]

    def within(self, chunk: Chunk) -> AlignedChunk:
        """The words that start in `chunk` (a stretch of a packed decode: its time map keeps
        every word inside one of the joined stretches) and their tokens."""
        words = tuple(w for w in self.words if chunk.start <= w.start * SAMPLE_RATE < chunk.end)
        return replace(self, tokens=[t for w in words for t in w.tokens], words=words)

    def without_echoes(self, part: Chunk, around: ChunkResult) -> AlignedChunk:
        """The stretch's decode without a word at its edge that repeats the word beside the
        stretch, heard again: alignment can start a word late (or end it early), and the
        stretch then holds the word's first (or last) sound, which the decoder reads as the
        whole word ("Please, Please enter your..." on a telephone recording). Only a word
        that runs up to the edge, within ECHO_SECONDS, is taken for an echo."""
        if not isinstance(around, AlignedChunk) or not self.words:
            return self
        begin, end = part.start / SAMPLE_RATE, part.end / SAMPLE_RATE
        after = next((w for w in around.words if w.start >= end - ECHO_SECONDS), None)
        before = next((w for w in reversed(around.words) if w.end <= begin + ECHO_SECONDS), None)
        words = list(self.words)
        if after and _same_word(words[-1], after) and words[-1].end >= end - ECHO_SECONDS:
            words.pop()
        if (
            words
            and before
            and _same_word(words[0], before)
            and words[0].start <= begin + ECHO_SECONDS
        ):
            words.pop(0)
        if len(words) == len(self.words):
            return self
        return replace(self, tokens=[t for w in words for t in w.tokens], words=tuple(words))

    def kept_segments(self) -> list[list[TimedWord]]:
        """The words of each segment the output keeps. A segment squeezed past any speaking
        rate is dropped, and the speech under it goes with it: a hallucinated repeat aligned
        into a second takes the real phrase beside it into its segment (tiny.en, JFK ten
        times over, batch 8: one "And so my fellow Americans" lost). So is a made-up word
        stretched over speech the decoder skipped (is_stretched_over_unread_speech). Counted
        as uncovered, that speech is decoded again (kvscribe.rereads.uncovered)."""
        kept = []
        for words in split_segments(self.words):
            if is_squeezed(words):
                continue
            words = [w for w in words if not is_stretched_over_unread_speech(w)]
            if words:
                kept.append(words)
        return kept

    def kept_words(self) -> list[TimedWord]:
        return [word for words in self.kept_segments() for word in words]


ECHO_SECONDS = 0.3  # how near a stretch's edge a repeated word must reach to be an echo
EDGE_WORDS = 2  # words a stretch read from inside a word may start with that were not said


def _same_word(a: TimedWord, b: TimedWord) -> bool:
    return bool(normalized(a.word)) and normalized(a.word) == normalized(b.word)


def on_original_clock(words: Sequence[TimedWord], chunk: Chunk) -> tuple[TimedWord, ...]:
    """Words aligned on the chunk's clock (seconds into its decoded audio), tidied, on the
    original clock (a pause cut out of the chunk shows again as the gap it was)."""
    tidied = tidy(list(words))
    spans = (chunk.time_map.word_span(w.start, w.end) for w in tidied)
    return tuple(
        replace(w, start=round(a, 3), end=round(b, 3))
        for w, (a, b) in zip(tidied, spans, strict=True)
    )


def decoded_segments(
    chunks: list[Chunk],
    batch: int,
    decode_group: Callable[..., list[AlignedChunk]],
    text_of: Callable[[list[int]], str],
    fallback: Fallback,
    with_words: bool,
    seen: Callable[[AlignedChunk], None] = lambda result: None,
    unread: Callable[[Chunk], None] = lambda part: None,
    prompted: bool = False,
) -> Iterator[Segment]:
    """The batched driver of every engine: `chunks` decoded `batch` at a time (`decode_group`:
    the engine's encode, decode with per-row fallback, and alignment; unfinished tails are
    decoded again, kvscribe.rereads.decode_chunks), their segments in time order with ids
    from 0. `prompted`: the engine takes a previous-text prompt per row
    (`decode_group(group, rereads, previous=...)`), so the chunks are dealt into lanes and
    each is prompted with the text decoded before it (kvscribe.chunk_rounds); else they
    are decoded in order, unprompted. `seen` hears every decode kept (a tail's too) before
    its segments, `unread` every stretch the decoder skipped in each read of it
    (decode_chunks)."""
    sourced = _sourced_segments(
        chunks,
        batch,
        decode_group,
        text_of,
        fallback,
        with_words,
        lambda _, r: seen(r),
        unread,
        prompted,
    )
    for _, segment in sourced:
        yield segment


def shared_segments(
    chunks: list[Chunk],
    inputs: int,
    batch: int,
    decode_group: Callable[..., list[AlignedChunk]],
    text_of: Callable[[list[int]], str],
    fallback: Fallback,
    with_words: bool,
    seen: Callable[[int, AlignedChunk], None] = lambda source, result: None,
    unread: Callable[[Chunk], None] = lambda part: None,
) -> list[list[Segment]]:
    """Several inputs decoded side by side: `chunks` holds each input's chunks (`source`: its
    number, below `inputs`) as one run, in order, so a batch row never mixes inputs and an
    input's chunks fill the rows the one before left. Per input, its segments as
    decoded_segments gives them alone (ids and window numbers from 0); `seen` hears each
    decode kept with its input's number, `unread` each stretch left unread (its `source`:
    the input's number)."""
    segments: list[list[Segment]] = [[] for _ in range(inputs)]
    sourced = _sourced_segments(
        chunks, batch, decode_group, text_of, fallback, with_words, seen, unread
    )
    for source, segment in sourced:
        segments[source].append(segment)
    return segments


def _sourced_segments(
    chunks, batch, decode_group, text_of, fallback, with_words, seen, unread, prompted=False
) -> Iterator[tuple[int, Segment]]:
    """(input number, segment) in chunk order, ids and window numbers counted per input;
    `prompted`: in lanes, each chunk prompted with the text before it (decoded_segments)."""
    first_chunk: dict[int, int] = {}
    for index, chunk in enumerate(chunks):
        first_chunk.setdefault(chunk.source, index)
    next_id: dict[int, int] = dict.fromkeys(first_chunk, 0)
    found: dict[int, list[Segment]] = {}  # each chunk decoded so far: its segments
    if prompted:
        rounds = chunk_rounds.in_lanes(len(chunks), batch)

        def previous(numbers: list[int]) -> list[list[int]]:
            return [chunk_rounds.text_before(number, chunks, found) for number in numbers]
    else:
        rounds, previous = chunk_rounds.in_order(len(chunks), batch), None
    pieces = decode_chunks(chunks, rounds, decode_group, unread, previous)
    ready = 0  # the first chunk whose segments are not yielded yet
    for index, decoded in pieces:
        # A chunk's pieces (a skipped stretch decoded again among them) in time order.
        segments = []
        for chunk, result in decoded:
            seen(chunk.source, result)
            window = index - first_chunk[chunk.source]
            text = text_of(list(result.tokens))
            segments += segments_of(chunk, window, result, text, 0, fallback, with_words)
        found[index] = sorted(segments, key=lambda segment: segment.start)
        while ready in found:  # rounds in lanes finish chunks out of order
            source = chunks[ready].source
            for segment in found[ready]:
                yield source, replace(segment, id=next_id[source])
                next_id[source] += 1
            if not prompted:  # nothing asks for the text before a chunk
                del found[ready]
            ready += 1


def segments_of(
    chunk: Chunk,
    index: int,
    result: AlignedChunk,
    text: str,
    first_id: int,
    fallback: Fallback,
    with_words: bool,
) -> list[Segment]:
    """Chunk number `index`'s segments on the original clock (ids from `first_id`), cut from
    its aligned words, with the request's silence rule, the decode's scores, temperature and
    compression ratio, its window start as `seek` and, `with_words`, its words. `text` is
    the decoded text of `result.tokens`."""
    if fallback.is_silence(result.no_speech_prob, result.avg_logprob):
        return []
    if unspoken(fallback, result.no_speech_prob, result.temperature, text):
        return []
    common = {
        "avg_logprob": result.avg_logprob,
        "no_speech_prob": result.no_speech_prob,
        "window": index,
        "seek": round(chunk.start * FRAMES_PER_SECOND / SAMPLE_RATE),
        "temperature": result.temperature,
        "compression_ratio": result.compression_ratio,
    }
    if not result.words:  # text without a word to time (punctuation only): the chunk's span
        if not text.strip():
            return []
        end = chunk.end / SAMPLE_RATE
        return [Segment(first_id, chunk.start_seconds, end, text, tuple(result.tokens), **common)]
    segments = []
    for words in result.kept_segments():  # not text the audio does not hold
        segments.append(
            Segment(
                first_id + len(segments),
                words[0].start,
                words[-1].end,
                "".join(word.word for word in words),
                tuple(token for word in words for token in word.tokens),
                words=tuple(_word(w) for w in words) if with_words else (),
                **common,
            )
        )
    return segments


def _word(word: TimedWord) -> Word:
    return Word(word.start, word.end, word.word, word.probability)
