"""From a chunk's text and its aligned words to segments: the batched path decodes each chunk
without timestamp tokens (they cost words: the model skips speech between a timestamp and
the next, docs/long-files.md) and takes every time from cross-attention alignment instead.

The words come from the engine's alignment (CTranslate2's `align`, the transformers
backend's DTW) on the chunk's own clock; here they are tidied (a word that swallowed a
pause is cut back to a typical word's length) and cut into segments where a subtitle line
would end: after a sentence, at a pause, and before a line grows too long.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import median

# openai-whisper's sentence-end marks (full-width ones for CJK text) and clause marks.
SENTENCE_ENDS = ".!?\u3002\uff01\uff1f"
CLAUSE_ENDS = ",;:\u3001\uff0c"


@dataclass(frozen=True)
class TimedWord:
    """One word of a decoded chunk: its text (with its leading space), its tokens and its
    span in seconds, on whatever clock the caller keeps (chunk or original)."""

    start: float
    end: float
    word: str
    probability: float
    tokens: tuple[int, ...] = ()


@dataclass(frozen=True)
class SegmentRules:
    """Where a segment ends. A pause this long between two words always ends one; a
    sentence end does once the segment has `min_seconds`; a segment reaching
    `max_seconds` is cut at its best break (a clause end, else its longest gap)."""

    pause: float = 0.5
    min_seconds: float = 1.0
    max_seconds: float = 8.0


def is_anomalous(words: Sequence[TimedWord]) -> bool:
    """openai-whisper's hallucination test (`hallucination_silence_threshold`'s): over the
    first 8 words, a point for an unlikely word (p < 0.15), and for a word shorter than
    0.133 s or longer than 2 s in proportion; 3 points, or nearly one a word, is made up."""
    score, counted = 0.0, 0
    for word in (w for w in words if is_spoken(w)):
        counted += 1
        duration = word.end - word.start
        score += (word.probability < 0.15) + max(0.0, 0.133 - duration) * 15
        score += max(0.0, duration - 2.0)
        if counted == 8:
            break
    return counted > 0 and (score >= 3 or score + 0.01 >= counted)


def is_spoken(word: TimedWord) -> bool:
    """Whether the word is more than punctuation (Whisper writes "..." for noise)."""
    return bool(word.word.strip(SENTENCE_ENDS + CLAUSE_ENDS + " \"'"))


def is_stretched_over_unread_speech(word: TimedWord) -> bool:
    """A word aligned longer than 2 s that the decoder gave less than a 0.15 chance: both
    of openai-whisper's marks of a made-up word (is_anomalous). The alignment had nothing
    else to put there: the decoder skipped the speech under it (base on a Russian telephone
    recording: "Rollia" at p 0.05 over 6.2 s, where 15 words were said). In 80 runs of 20
    long recordings in five languages on four CTranslate2 paths, no other word was aligned
    longer than 1.32 s (docs/long-files.md, "On an Intel Xeon, and in Italian and Russian")."""
    return word.end - word.start > 2.0 and word.probability < 0.15


def is_squeezed(words: Sequence[TimedWord]) -> bool:
    """Four words or more at over ten a second: no one speaks that fast (read speech runs
    at 2-4 words a second). The decoder wrote text the audio does not hold (tiny.en on
    the JFK sample four times over: the quote once more than spoken, aligned into 1.1 s)."""
    return len(words) >= 4 and (words[-1].end - words[0].start) / len(words) < 0.1


def ends_sentence(word: str) -> bool:
    return word.rstrip().endswith(tuple(SENTENCE_ENDS))


def tidy(words: Sequence[TimedWord]) -> list[TimedWord]:
    """openai-whisper's rule for words at a boundary: a word after a sentence end (or the
    first word) or one ending a sentence is at most twice the median word's length (the
    median capped at 0.7 s). Alignment gives a pause to the word beside it; this gives it
    back, so a pause shows as a gap between words."""
    durations = [w.end - w.start for w in words if w.end > w.start]
    if not durations:
        return list(words)
    longest = 2 * min(0.7, median(durations))
    tidied = []
    for index, word in enumerate(words):
        if word.end - word.start > longest:
            after_break = index == 0 or ends_sentence(words[index - 1].word)
            if after_break:
                word = replace(word, start=word.end - longest)
            elif ends_sentence(word.word):
                word = replace(word, end=word.start + longest)
        tidied.append(word)
    return tidied


def split_segments(
    words: Sequence[TimedWord], rules: SegmentRules = SegmentRules()
) -> list[list[TimedWord]]:
    """`words` (in time order) cut into segments by `rules`; every word in exactly one."""
    segments: list[list[TimedWord]] = []
    current: list[TimedWord] = []
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else None
        current.append(word)
        if following is None or _ends_here(current, following, rules):
            segments.extend(_within_limit(current, rules))
            current = []
    return segments


def _ends_here(current: list[TimedWord], following: TimedWord, rules: SegmentRules) -> bool:
    last = current[-1]
    if following.start - last.end >= rules.pause:
        return True
    return ends_sentence(last.word) and last.end - current[0].start >= rules.min_seconds


def _within_limit(words: list[TimedWord], rules: SegmentRules) -> list[list[TimedWord]]:
    """`words` as one segment, or cut at their best break until each fits `max_seconds`."""
    if len(words) < 2 or words[-1].end - words[0].start <= rules.max_seconds:
        return [words]
    cut = _best_break(words)
    return _within_limit(words[:cut], rules) + _within_limit(words[cut:], rules)


def _best_break(words: list[TimedWord]) -> int:
    """Where to cut an over-long run (index of the first word after the cut): its middle
    half's latest clause end, else the longest gap there, else its middle."""
    low, high = max(1, len(words) // 4), max(2, (3 * len(words)) // 4)
    candidates = range(low, min(high, len(words) - 1) + 1)
    clauses = [i for i in candidates if words[i - 1].word.rstrip().endswith(tuple(CLAUSE_ENDS))]
    if clauses:
        return clauses[-1]
    return max(
        candidates, key=lambda i: (words[i].start - words[i - 1].end, -abs(i - len(words) // 2))
    )
