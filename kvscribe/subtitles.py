"""srt and vtt: cues per segment, or laid out from words as openai-whisper's
SubtitlesWriter lays them out (line width, lines per cue, words per line, highlighted
words), from the same millisecond-rounded times the JSON holds."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from kvscribe.text_layout import (
    DEFAULT_OPTIONS,
    WriterOptions,
    clean,
    clean_word,
    clock,
    has_words,
    milliseconds,
    seconds_as_written,
)
from kvscribe.types import Segment, Transcript, Word

# openai-whisper starts a new cue at a pause longer than this when it lays out
# cues by width and count (not by segment).
LONG_PAUSE_SECONDS = 3.0


@dataclass(frozen=True)
class _Placed:
    """A word in a cue; `text` carries what separates it from the previous word
    (a space, a line break, or nothing at the start of a cue)."""

    start: float
    end: float
    text: str


@dataclass(frozen=True)
class _Cue:
    start_ms: int
    end_ms: int
    text: str


def _segment_words(segment: Segment) -> list[Word]:
    """The words to lay out, at the JSON's rounded times; a segment that has text
    but no words (a backend could not align it) is kept as one word."""
    words = [w for w in segment.words if clean_word(w.word).strip()]
    if not words and clean(segment.text):
        words = [Word(segment.start, segment.end, " " + clean(segment.text), 1.0)]
    return [
        Word(
            seconds_as_written(w.start),
            seconds_as_written(w.end),
            clean_word(w.word),
            w.probability,
        )
        for w in words
    ]


def _chunks(words: list[Word], size: int | None) -> Iterator[list[Word]]:
    step = size or len(words) or 1
    for index in range(0, len(words), step):
        yield words[index : index + step]


class _CueLayout:
    """openai-whisper's line and cue breaking, word by word."""

    def __init__(self, options: WriterOptions, first_start: float):
        self.options = options
        self.width = options.max_line_width or math.inf
        self.cues: list[list[_Placed]] = []
        self.current: list[_Placed] = []
        self.line_length = 0
        self.line_count = 1
        self.last_start = first_start

    def add(self, word: Word, opens_chunk: bool) -> None:
        # The pause runs from the previous word's start, as openai-whisper measures it;
        # a new segment (or max_words_per_line group) opens a cue when cues follow segments.
        long_pause = (
            not self.options.preserve_segments and word.start - self.last_start > LONG_PAUSE_SECONDS
        )
        chunk_break = opens_chunk and self.options.preserve_segments and bool(self.current)
        fits = self.line_length + len(word.word) <= self.width
        text = word.word
        if self.line_length > 0 and fits and not long_pause and not chunk_break:
            self.line_length += len(text)
        else:
            text = text.strip()
            if chunk_break or (self.current and self._cue_is_full(long_pause)):
                self._close_cue()
            elif self.line_length > 0:
                self.line_count += 1
                text = "\n" + text
            self.line_length = len(text.strip())
        self.current.append(_Placed(word.start, word.end, text))
        self.last_start = word.start

    def _cue_is_full(self, long_pause: bool) -> bool:
        limit = self.options.max_line_count
        return limit is not None and (long_pause or self.line_count >= limit)

    def _close_cue(self) -> None:
        self.cues.append(self.current)
        self.current = []
        self.line_count = 1

    def finish(self) -> list[list[_Placed]]:
        if self.current:
            self._close_cue()
        return self.cues


def _word_cues(t: Transcript, options: WriterOptions) -> list[list[_Placed]]:
    per_segment = [_segment_words(s) for s in t.segments]
    first = next((w.start for words in per_segment for w in words), 0.0)
    layout = _CueLayout(options, first)
    for words in per_segment:
        for chunk in _chunks(words, options.max_words_per_line):
            for index, word in enumerate(chunk):
                layout.add(word, opens_chunk=index == 0)
    return layout.finish()


def _underlined(text: str) -> str:
    body = text.lstrip()
    return f"{text[: len(text) - len(body)]}<u>{body}</u>"


def _highlighted(cue: list[_Placed]) -> Iterator[_Cue]:
    """One cue per word with that word underlined; the cue's plain text fills the gaps."""
    plain = "".join(p.text for p in cue)
    last_end = milliseconds(cue[0].start)
    for index, word in enumerate(cue):
        start, end = milliseconds(word.start), milliseconds(word.end)
        if start != last_end:
            yield _Cue(last_end, start, plain)
        marked = "".join(_underlined(p.text) if i == index else p.text for i, p in enumerate(cue))
        yield _Cue(start, end, marked)
        last_end = end


def _subtitle_cues(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> list[_Cue]:
    """The cues srt and vtt both write: per segment, or laid out from words."""
    if not has_words(t):
        return [
            _Cue(milliseconds(s.start), milliseconds(s.end), clean(s.text))
            for s in t.segments
            if clean(s.text)
        ]
    cues: list[_Cue] = []
    for placed in _word_cues(t, options):
        if options.highlight_words:
            cues += _highlighted(placed)
        else:
            text = "".join(p.text for p in placed)
            cues.append(_Cue(milliseconds(placed[0].start), milliseconds(placed[-1].end), text))
    return cues


def render_srt(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    def srt_clock(ms: int) -> str:
        return clock(ms, always_hours=True, marker=",")

    return "".join(
        f"{number}\n{srt_clock(c.start_ms)} --> {srt_clock(c.end_ms)}\n{c.text}\n\n"
        for number, c in enumerate(_subtitle_cues(t, options), start=1)
    )


def render_vtt(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    def vtt_clock(ms: int) -> str:  # hours only when there are any, as openai-whisper writes
        return clock(ms, always_hours=False, marker=".")

    cues = _subtitle_cues(t, options)
    return "WEBVTT\n\n" + "".join(
        f"{vtt_clock(c.start_ms)} --> {vtt_clock(c.end_ms)}\n{c.text}\n\n" for c in cues
    )
