"""`--batch-size 1`: the speech a window's decode skipped, found by its aligned words and
read again.

faster-whisper's sequential decode can jump over speech inside a window while its
timestamps say it did not: its seek then follows the timestamps, and the words are lost
(base on the French telephone recording lost three prompts, 37 words, and read the prompts
after them twice). With word times, cross-attention alignment puts each word where its
sound is, so the seek follows the words, and skipped speech lies either under one word the
alignment had to stretch over it (the noisy English telephone recording's " the" over
6.6 s at probability 0.997, where 14 words were said; no spoken word in those runs was
aligned longer than 1.6 s), or, where a window starts late and reads on from later
speech, in a gap of GAP_SECONDS before its first word. So the sequential path always
aligns (the words are dropped from the output unless asked for), and the stretch under a
word longer than STRETCHED_SECONDS, or such a gap, is decoded again on its own, prompted
with the text before it; its segments come between the parts before and after it, a
stretched word itself left to the new reading where it hears it again. Live mode does
not: its next decode of the buffer reads that speech again anyway
(DecodeRequest.reread_stretched).
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Joined, Samples
from kvscribe.backends.ctranslate2 import stream as ct2_stream
from kvscribe.timing.timed_words import TimedWord, is_anomalous, is_squeezed
from kvscribe.timing.words import normalized

STRETCHED_SECONDS = 2.0  # openai-whisper's "too long to be one word" (is_anomalous)
# Seconds between two aligned words (on the decoded clock: digital silence is cut out)
# taken for skipped speech: a window that starts late reads on from later speech, with
# nothing aligned over what it skipped (base, French telephone prompts on oneDNN with
# AVX-512: 15 s, 37 words). Telephone prompts pause 1-2 s, the noisy recording once 8 s.
GAP_SECONDS = 5.0
MAX_DEPTH = 2  # a stretch read again is itself searched once more, no deeper


@dataclass
class Rereads:
    """The stretches read again in one decode (its halves add from two threads)."""

    stretches: int = 0
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, seconds: float) -> None:
        with self._lock:
            self.stretches += 1
            self.seconds += seconds

    def describe(self) -> str:
        """The stats' row."""
        return (
            f"{self.stretches} stretch{'es' if self.stretches != 1 else ''} of skipped speech "
            f"({self.seconds:.1f} s: under a word aligned over {STRETCHED_SECONDS:g} s, or a "
            f"gap of {GAP_SECONDS:g} s between two), decoded again"
        )


def transcribe(
    engine,
    audio: Samples,
    options: dict,
    rereads: Rereads | None,
    encoder_frames: int | None = None,
    depth: int = MAX_DEPTH,
):
    """ct2_stream.transcribe's (segments, info), with each stretch under a stretched word
    decoded again (`rereads` None: as faster-whisper gives them)."""
    if rereads is None:
        return ct2_stream.transcribe(engine, audio, encoder_frames, **options)
    raw, info = ct2_stream.transcribe(
        engine, audio, encoder_frames, **options | {"word_timestamps": True}
    )
    if depth < MAX_DEPTH:
        raw = heard(raw)
    if depth == 0:
        return raw, info
    language = info.language
    words_of = _WordTokens(engine, options["task"], language)

    def reread(start: float, end: float, before: str) -> list:
        begin, stop = round(start * SAMPLE_RATE), min(round(end * SAMPLE_RATE), audio.size)
        rereads.add((stop - begin) / SAMPLE_RATE)
        # No temperature fallback: a stretch that reads badly at the first temperature is
        # taken for no speech, not sampled (each sampled try loads a model of its own on
        # a CPU, sampling.py: about 2 s for base here, five temperatures after one another)
        again = options | {
            "language": language,
            "initial_prompt": before.strip() or None,
            "temperature": list(options["temperature"])[:1],
        }
        part = Joined(audio, [(begin, stop)])
        segments, _ = transcribe(engine, part, again, rereads, depth=depth - 1)
        return [s for s in ct2_stream.shifted(segments, begin) if _plausible(s)]

    return read_again(raw, reread, words_of), info


def read_again(
    raw: Iterator, reread: Callable[[float, float, str], list], words_of: Callable
) -> Iterator:
    """faster-whisper's segments, each cut at a stretched word or before a long silent gap,
    with what `reread(start, end, text before)` decodes of that stretch between the parts."""
    before, last_end = "", None
    for segment in raw:
        for piece in _pieces(segment, reread, words_of, before, last_end):
            before = piece.text
            last_end = piece.words[-1].end if piece.words else last_end
            yield piece


def _pieces(
    segment, reread: Callable, words_of: Callable, before: str, last_end: float | None
) -> Iterator:
    words = list(segment.words or ())
    ends = [last_end] + [w.end for w in words[:-1]]
    at = next((i for i, w in enumerate(words) if _skipped(w, ends[i])), None)
    if at is None:
        yield segment
        return
    word = words[at]
    if word.end - word.start > STRETCHED_SECONDS:
        yield from _stretched(segment, words, at, reread, words_of, before)
        return
    # the gap before the word: nothing aligned there, so nothing heard again to drop
    again = reread(ends[at], word.start, before + _text(words[:at]))
    first, rest = (
        words_of(segment, words[:at], words[at:], _text(words[:at])) if at else (None, segment)
    )
    if first is not None:
        yield first
    yield from again
    yield from _pieces(rest, reread, words_of, "", word.start)


def _skipped(word, last_end: float | None) -> bool:
    """A word stretched over speech, or a gap before it no pause in speech lasts."""
    if word.end - word.start > STRETCHED_SECONDS:
        return True
    return last_end is not None and word.start - last_end > GAP_SECONDS


def _stretched(segment, words: list, at: int, reread, words_of, before: str) -> Iterator:
    stretched = words[at]
    again = reread(stretched.start, stretched.end, before + _text(words[:at]))
    heard = next((w for s in again for w in s.words or ()), None)
    head = words[:at]
    if heard is None or normalized(heard.word) != normalized(stretched.word):
        # not heard again: kept, ending where the new reading starts
        end = stretched.end if heard is None else max(stretched.start, heard.start)
        head.append(dataclasses.replace(stretched, end=end))
    first, rest = words_of(segment, head, words[at + 1 :], _text(words[: at + 1]))
    if first is not None:
        yield first
    yield from again
    if rest is not None:
        yield from _pieces(rest, reread, words_of, "", stretched.end)


def _plausible(segment) -> bool:
    """openai-whisper's hallucination test passes, and its words are not squeezed past any
    speaking rate: a stretch read alone can come back as a remembered sentence
    (kvscribe.aligned_chunks keeps a batched chunk's rereads by the same tests)."""
    words = [TimedWord(w.start, w.end, w.word, w.probability) for w in segment.words or ()]
    return bool(words) and not is_anomalous(words) and not is_squeezed(words)


def heard(segments: Iterator) -> Iterator:
    """A stretch's reading up to its first segment that says nothing but punctuation, no
    window decoded after it. Over noise a stretch read again can come back as " . . . .",
    each dot aligned as a word over seconds: the seek followed the dots through the stretch
    and the dots' stretches were read again, window after window of dots (the noisy
    telephone recording: 8 windows, 2 s of one core), all dropped in the end by
    `_plausible`."""
    return itertools.takewhile(_has_words, segments)


def _has_words(segment) -> bool:
    return any(character.isalnum() for character in segment.text)


def _text(words: list) -> str:
    return "".join(w.word for w in words)


class _WordTokens:
    """A segment cut in two around a stretched word, each part a segment of its own with
    its words and tokens: the head's, the shortest run of the segment's tokens that decodes
    to its text; the tail's, those after the run through the stretched word (the
    tokenizer's own encoding of a part's text where no run decodes to it)."""

    def __init__(self, engine, task: str, language: str):
        self._engine, self._task, self._language = engine, task, language
        self._tokenizer = None

    def __call__(self, segment, head: list, tail: list, through: str) -> tuple:
        tokens = list(segment.tokens)
        first = rest = None
        if head:
            count = self._prefix(tokens, _text(head))
            taken = tokens[:count] if count is not None else self._encoded(_text(head))
            first = dataclasses.replace(
                segment, end=head[-1].end, text=_text(head), tokens=taken, words=head
            )
        if tail:
            count = self._prefix(tokens, through)
            taken = tokens[count:] if count is not None else self._encoded(_text(tail))
            rest = dataclasses.replace(
                segment, start=tail[0].start, text=_text(tail), tokens=taken, words=tail
            )
        return first, rest

    def _prefix(self, tokens: list[int], text: str) -> int | None:
        tokenizer = self._load()
        for count in range(1, len(tokens) + 1):
            if tokenizer.decode(tokens[:count]).strip() == text.strip():
                return count
        return None

    def _encoded(self, text: str) -> list[int]:
        return list(self._load().encode(text))

    def _load(self):
        from kvscribe.adapters import faster_whisper as adapter

        if self._tokenizer is None:
            self._tokenizer = adapter.tokenizer(self._engine, self._task, self._language)
        return self._tokenizer
