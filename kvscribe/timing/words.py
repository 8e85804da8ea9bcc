"""Words from decoder tokens, the way openai-whisper and faster-whisper make them.

Backend-neutral (no torch): a backend that times tokens (by DTW over alignment
heads, or from its engine) groups them into words here, merges punctuation into
its neighbours, and trims implausibly long words with the same heuristics, so
every backend's words read alike.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvscribe.types import Word

# Whisper writes a small number in digits in one decode and in words in the next ("7 or 9",
# "seven or nine"): the same speech, so the same word here.
_NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
)
_NUMBERS = {word: str(value) for value, word in enumerate(_NUMBER_WORDS.split(" "))}


def normalized(word: str) -> str:
    """What two decodes of the same speech must share for a word to count as the same one:
    case, punctuation and a small number's form differ between them ("Americans," vs
    "Americans", "Seven" vs "7"). Live mode's agreement and the batched paths' echo rule
    (kvscribe.aligned_chunks) both compare words by it."""
    plain = re.sub(r"[^\w']", "", word.casefold())
    return _NUMBERS.get(plain, plain)


# openai-whisper's defaults (transcribe(prepend_punctuations=..., append_punctuations=...));
# the full-width marks are CJK punctuation, meant.
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"  # noqa: RUF001
SENTENCE_END_MARKS = ".。!！?？"  # noqa: RUF001
# Written without spaces between words: split where tokens complete a character instead.
UNSPACED_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
LONGEST_MEDIAN_WORD = 0.7  # seconds: a median above this is not trusted as a word length
_REPLACEMENT = "\ufffd"  # what decoding yields for a token that ends mid-character

Decode = Callable[[list[int]], str]


@dataclass
class WordTiming:
    """A word being built: its tokens, and times relative to its window until placed."""

    word: str
    tokens: list[int]
    start: float = 0.0
    end: float = 0.0
    probability: float = 0.0


@dataclass
class Durations:
    """The window's typical word length, which the trimming heuristics measure against."""

    median: float = 0.0
    longest: float = 0.0  # twice the median


@dataclass
class SegmentWords:
    """One segment's words with the segment's own (timestamp-token) bounds, absolute."""

    start: float
    end: float
    words: list[WordTiming] = field(default_factory=list)


def split_on_unicode(tokens: Sequence[int], decode: Decode) -> tuple[list[str], list[list[int]]]:
    """Group tokens so each group decodes to whole characters (a token may end mid-UTF-8)."""
    full = decode(list(tokens))
    words: list[str] = []
    groups: list[list[int]] = []
    current: list[int] = []
    offset = 0
    for token in tokens:
        current.append(token)
        text = decode(current)
        broken = text.find(_REPLACEMENT)
        # A replacement character that is also in the full text is real, not a cut character.
        if broken < 0 or (offset + broken < len(full) and full[offset + broken] == _REPLACEMENT):
            words.append(text)
            groups.append(current)
            current = []
            offset += len(text)
    return words, groups


def split_on_spaces(
    tokens: Sequence[int], decode: Decode, eot: int
) -> tuple[list[str], list[list[int]]]:
    """English-like text: a word starts at a token with a leading space, at punctuation, and
    at special tokens (id >= eot); other tokens continue the word before them."""
    words: list[str] = []
    groups: list[list[int]] = []
    for text, group in zip(*split_on_unicode(tokens, decode), strict=True):
        starts_word = group[0] >= eot or text.startswith(" ") or text.strip() in string.punctuation
        if starts_word or not words:
            words.append(text)
            groups.append(list(group))
        else:
            words[-1] += text
            groups[-1].extend(group)
    return words, groups


def split_words(
    tokens: Sequence[int], decode: Decode, eot: int, language: str = "en"
) -> tuple[list[str], list[list[int]]]:
    """Words and each word's tokens, as openai-whisper's tokenizer.split_to_word_tokens."""
    if language in UNSPACED_LANGUAGES:
        return split_on_unicode(tokens, decode)
    return split_on_spaces(tokens, decode, eot)


def merge_punctuations(
    words: list[WordTiming],
    prepended: str = PREPEND_PUNCTUATIONS,
    appended: str = APPEND_PUNCTUATIONS,
) -> None:
    """Fold opening punctuation into the next word and closing punctuation into the one
    before, in place. A merged-away entry keeps its place with no text and no tokens, so
    token counts still line up with the segments; callers skip the empty ones."""
    following = len(words) - 1
    for index in range(len(words) - 2, -1, -1):
        previous, nxt = words[index], words[following]
        if previous.word.startswith(" ") and previous.word.strip() in prepended:
            nxt.word = previous.word + nxt.word
            nxt.tokens = previous.tokens + nxt.tokens
            previous.word, previous.tokens = "", []
        else:
            following = index
    kept = 0
    for index in range(1, len(words)):
        previous, nxt = words[kept], words[index]
        if not previous.word.endswith(" ") and nxt.word in appended:
            previous.word += nxt.word
            previous.tokens = previous.tokens + nxt.tokens
            nxt.word, nxt.tokens = "", []
        else:
            kept = index


def measure_durations(words: Sequence[WordTiming]) -> Durations:
    """Median non-zero word length, capped at LONGEST_MEDIAN_WORD (openai-whisper's rule)."""
    lengths = sorted(w.end - w.start for w in words if w.end - w.start != 0)
    if not lengths:
        return Durations()
    middle = len(lengths) // 2
    median = lengths[middle] if len(lengths) % 2 else (lengths[middle - 1] + lengths[middle]) / 2
    median = min(LONGEST_MEDIAN_WORD, median)
    return Durations(median, 2 * median)


def clamp_at_sentence_ends(words: list[WordTiming], durations: Durations) -> None:
    """A sentence mark or the word after one may not last over twice the median word: DTW
    tends to stretch them over the pause between sentences. In place, before merging."""
    if durations.median == 0:
        return
    longest = durations.longest
    for index in range(1, len(words)):
        word = words[index]
        if word.end - word.start <= longest:
            continue
        if word.word in SENTENCE_END_MARKS:
            word.end = word.start + longest
        elif words[index - 1].word in SENTENCE_END_MARKS:
            word.start = word.end - longest


def place_in_segments(
    words: Sequence[WordTiming],
    segments: list[SegmentWords],
    token_counts: Sequence[int],
    offset: float,
) -> None:
    """Hand the window's words (times relative to `offset`) to the segments whose text
    tokens they cover, in order, with absolute times rounded to 10 ms."""
    index = 0
    for segment, count in zip(segments, token_counts, strict=True):
        taken = 0
        while index < len(words) and taken < count:
            timing = words[index]
            if timing.word:
                segment.words.append(
                    WordTiming(
                        timing.word,
                        timing.tokens,
                        round(offset + timing.start, 2),
                        round(offset + timing.end, 2),
                        timing.probability,
                    )
                )
            taken += len(timing.tokens)
            index += 1


def fit_to_segment(segment: SegmentWords, durations: Durations, last_speech: float) -> float:
    """openai-whisper's trims at a segment's edges, in place; returns the new end of speech.

    After a pause (first word ends over 4 medians after the last speech) a long first or
    second word is shortened to twice the median: DTW stretches words over the silence
    before them. A first/last word reaching over 0.5 s past the segment's own timestamp
    is pulled back to it.
    """
    words = segment.words
    if not words:
        return last_speech
    first, median, longest = words[0], durations.median, durations.longest
    after_pause = first.end - last_speech > median * 4
    too_long = first.end - first.start > longest or (
        len(words) > 1 and words[1].end - first.start > longest * 2
    )
    if after_pause and too_long:
        if len(words) > 1 and words[1].end - words[1].start > longest:
            boundary = max(words[1].end / 2, words[1].end - longest)
            first.end = words[1].start = boundary
        first.start = max(0.0, first.end - longest)
    if segment.start < first.end and segment.start - 0.5 > first.start:
        first.start = max(0.0, min(first.end - median, segment.start))
    else:
        segment.start = first.start
    last = words[-1]
    if segment.end > last.start and segment.end + 0.5 < last.end:
        last.end = max(last.start + median, segment.end)
    else:
        segment.end = last.end
    return segment.end


def as_words(timings: Sequence[WordTiming]) -> tuple[Word, ...]:
    return tuple(Word(t.start, t.end, t.word, float(t.probability)) for t in timings)
