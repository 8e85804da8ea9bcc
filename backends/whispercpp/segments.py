"""kvscribe Segments from whisper-cli's full JSON: text token ids, mean token log-probability,
compression ratio, the window each was decoded in, and words when asked for; an input run
as pieces (backends/whispercpp/pieces.py) is read a piece at a time as one run.

whisper-cli names no windows, so they are recovered from the timestamp tokens: a window's
first segment opens with one (<|k|>, k steps of 20 ms from the window's start) and a
segment closed by one ends there, so `seek` = start - 2k or end - 2k centiseconds.
Under -p whisper.cpp moves the segments of a later part to the input's clock but not their
tokens' times; the difference between a segment's end and its last token's end is that
shift, and is added back.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvscribe.backends.whispercpp.fulljson import JsonSegment, Vocabulary
from kvscribe.backends.whispercpp.words import SECONDS_PER_CS, window_words
from kvscribe.decoding import compression_ratio
from kvscribe.timing.words import WordTiming, as_words
from kvscribe.types import Segment, Word

# A whole segment that is only a caption annotation or music notes: "[BLANK_AUDIO]",
# "(wind blowing)", "♪♪" (or a note cut mid-character). openai-whisper suppresses the
# tokens these start with; see without_annotations.
_ANNOTATION = re.compile(r"\s*(\[[^\]]*\]|\([^)]*\)|[♩♪♫♬♭♮♯\ufffd\s]+)\s*")
CS_PER_TIMESTAMP = 2  # a timestamp token step is 20 ms
FRAMES_PER_CS = 1  # mel frames are 10 ms: openai-whisper's `seek` counts them


@dataclass
class Window:
    seek_cs: int
    shift_cs: int
    segments: list[JsonSegment] = field(default_factory=list)


class SegmentMaker:
    """kvscribe Segments from the JSON segments of one input, given a piece at a time:
    numbered from 0 across pieces, windows counted on, and words placed after the speech
    that came before (kvscribe.timing.words' `last_speech`), as if whisper-cli had run once."""

    def __init__(self, vocab: Vocabulary, words: bool):
        self.vocab = vocab
        self.words = words
        self.made = 0  # segments kept so far
        self.windows = 0  # windows seen so far
        self.dropped = 0  # annotation-only segments left out (without_annotations)
        self._last_speech = 0.0

    def add(self, segments: Sequence[JsonSegment], language: str) -> list[Segment]:
        """The next piece's segments (already on the input's clock), annotations dropped."""
        built: list[Segment] = []
        for window in windows(segments, self.vocab):
            built += self._window(window, language)
            self.windows += 1
        kept, dropped = without_annotations(built)
        self.dropped += dropped
        renumbered = [dataclasses.replace(s, id=self.made + s.id) for s in kept]
        self.made += len(renumbered)
        return renumbered

    def _window(self, window: Window, language: str) -> list[Segment]:
        bounds: list[tuple[float, float, tuple[Word, ...]]]
        if self.words:
            placed, self._last_speech = window_words(
                window.segments,
                window.seek_cs,
                window.shift_cs,
                self.vocab,
                language,
                self._last_speech,
            )
            bounds = [_enclosing(p.start, p.end, p.words) for p in placed]
        else:
            bounds = [
                (s.start_cs * SECONDS_PER_CS, s.end_cs * SECONDS_PER_CS, ())
                for s in window.segments
            ]
        return [
            _segment(number, segment, (start, end), timed, self.windows, window, self.vocab)
            for number, (segment, (start, end, timed)) in enumerate(
                zip(window.segments, bounds, strict=True)
            )
        ]


def without_annotations(segments: Sequence[Segment]) -> tuple[list[Segment], int]:
    """The segments that hold speech, renumbered, and how many were dropped.

    whisper-cli does not suppress non-speech tokens by default, and tiny.en writes 20 s of
    silence as a confident " [BLANK_AUDIO]" (mean log-probability -0.6) that the no-speech
    test (which also needs it below -1) keeps. Suppressing them (-sns, openai-whisper's
    default) fixes silence but not low noise: the model then writes "♪♪" (whisper.cpp
    misses the partial-character tokens openai-whisper suppresses) or, with those gone
    too, a confident loop whisper.cpp's entropy test lets through. Decoding as whisper.cpp
    does and dropping segments that are nothing but an annotation gives no text for both.
    """
    kept = [s for s in segments if not _ANNOTATION.fullmatch(s.text)]
    renumbered = [dataclasses.replace(s, id=number) for number, s in enumerate(kept)]
    return renumbered, len(segments) - len(kept)


def windows(segments: Sequence[JsonSegment], vocab: Vocabulary) -> list[Window]:
    """Consecutive segments grouped by the window they were decoded in."""
    grouped: list[Window] = []
    for segment in segments:
        shift = _part_shift(segment)
        seek = _seek_cs(segment, vocab)
        current = grouped[-1] if grouped else None
        if current is not None and seek in (None, current.seek_cs):
            current.segments.append(segment)
            continue
        if seek is None:  # no timestamp token to place it: its own start stands in
            seek = segment.start_cs
        grouped.append(Window(seek, shift, [segment]))
    return grouped


def _seek_cs(segment: JsonSegment, vocab: Vocabulary) -> int | None:
    """The window's start (absolute centiseconds) from a closing, else an opening timestamp
    token; None for a segment with neither (it continues the window before it)."""
    if not segment.tokens:
        return None
    closing = vocab.timestamp(segment.tokens[-1].id)
    if closing is not None and len(segment.tokens) > 1:
        return segment.end_cs - CS_PER_TIMESTAMP * closing
    opening = vocab.timestamp(segment.tokens[0].id)
    if opening is not None:
        return segment.start_cs - CS_PER_TIMESTAMP * opening
    return None


def _part_shift(segment: JsonSegment) -> int:
    last = segment.tokens[-1] if segment.tokens else None
    if last is None or last.end_cs is None:
        return 0
    return segment.end_cs - last.end_cs


def _enclosing(
    start: float, end: float, timings: Sequence[WordTiming]
) -> tuple[float, float, tuple[Word, ...]]:
    """The words at 10 ms, and the segment's bounds widened to hold them (openai-whisper's
    trims can leave the first word a little before the segment's timestamp)."""
    words = tuple(
        dataclasses.replace(w, start=round(w.start, 2), end=round(w.end, 2))
        for w in as_words(timings)
    )
    if words:
        start, end = min(start, words[0].start), max(end, words[-1].end)
    return round(start, 2), round(end, 2), words


def _segment(
    number: int,
    segment: JsonSegment,
    bounds: tuple[float, float],
    words: tuple[Word, ...],
    window_index: int,
    window: Window,
    vocab: Vocabulary,
) -> Segment:
    logprobs = [token.logprob for token in segment.tokens]
    return Segment(
        id=number,
        start=bounds[0],
        end=bounds[1],
        text=segment.text,
        tokens=tuple(token.id for token in segment.tokens if vocab.is_text(token.id)),
        avg_logprob=statistics.fmean(logprobs) if logprobs else None,
        window=window_index,
        seek=window.seek_cs * FRAMES_PER_CS,
        compression_ratio=compression_ratio(segment.text),
        words=words,
    )
