"""Transcript writers: txt, srt, vtt, json, tsv, with openai-whisper's conventions.

The JSON has openai-whisper's shape (top-level text/segments/language, its segment
fields, `words` when word timestamps were asked) with kvscribe's own fields in a
separate "kvscribe" object, so tools written for openai-whisper's JSON read it.
With words, srt/vtt cues are laid out as openai-whisper's SubtitlesWriter lays
them out (line width, lines per cue, words per line, highlighted words), from the
same millisecond-rounded times the JSON holds, so openai-whisper's writers fed
kvscribe's JSON produce the same subtitles.

Files are named `<stem>.<ext>` and written atomically (kvscribe.atomic_file), so an
interrupted run never leaves half a file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kvscribe.atomic_file import atomic_write_text
from kvscribe.errors import UsageError
from kvscribe.types import Segment, Transcript, Word

FORMATS = ("txt", "srt", "vtt", "json", "tsv")

# openai-whisper starts a new cue at a pause longer than this when it lays out
# cues by width and count (not by segment).
LONG_PAUSE_SECONDS = 3.0


@dataclass(frozen=True)
class WriterOptions:
    """How subtitles and tsv are laid out; every option needs word timestamps.

    None turns a limit off. As in openai-whisper, cues follow segments unless both
    `max_line_width` and `max_line_count` are set; `max_words_per_line` then has no
    effect (openai-whisper ignores it there too). Without words in the transcript
    every option is ignored and cues are segments. `word_level_tsv` writes one tsv
    row per word instead of per segment.
    """

    highlight_words: bool = False
    max_line_width: int | None = None
    max_line_count: int | None = None
    max_words_per_line: int | None = None
    word_level_tsv: bool = False

    def __post_init__(self) -> None:
        for flag, value in (
            ("--max-line-width", self.max_line_width),
            ("--max-line-count", self.max_line_count),
            ("--max-words-per-line", self.max_words_per_line),
        ):
            if value is not None and value < 1:
                raise UsageError(
                    f"must be at least 1, got {value}",
                    subject=flag,
                    hint="give a positive number or leave the option out",
                )

    @property
    def preserve_segments(self) -> bool:
        return self.max_line_count is None or self.max_line_width is None


DEFAULT_OPTIONS = WriterOptions()


class Renderer(Protocol):
    def __call__(self, t: Transcript, options: WriterOptions = DEFAULT_OPTIONS, /) -> str: ...


def _seconds(value: float) -> float:
    """Times as the JSON holds them; subtitles and tsv use the same rounded values."""
    return round(float(value), 3)


def _milliseconds(seconds: float) -> int:
    return max(0, round(_seconds(seconds) * 1000))


def _clock(ms: int, *, always_hours: bool, marker: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    head = f"{hours:02d}:" if always_hours or hours else ""
    return f"{head}{minutes:02d}:{secs:02d}{marker}{millis:03d}"


def timestamp(seconds: float, *, always_hours: bool = True, marker: str = ".") -> str:
    """`HH:MM:SS.mmm` (hours optional when zero), rounded to the millisecond."""
    return _clock(max(0, round(seconds * 1000)), always_hours=always_hours, marker=marker)


def _clean(text: str) -> str:
    # A cue may not contain "-->" (it would read as a timing line) nor blank lines.
    return " ".join(text.replace("-->", "->").split())


def _clean_word(text: str) -> str:
    # Keeps the leading space the tokenizer gave the word: it separates words in a line.
    return text.replace("-->", "->").replace("\r", " ").replace("\n", " ").replace("\t", " ")


def render_console_line(start: float, end: float, text: str) -> str:
    """The line printed on stdout as a segment is decoded (openai-whisper's verbose form)."""
    span = f"{timestamp(start, always_hours=False)} --> {timestamp(end, always_hours=False)}"
    return f"[{span}]  {_clean(text)}"


def has_words(t: Transcript) -> bool:
    """Word timestamps were decoded for this transcript."""
    return any(s.words for s in t.segments)


def render_txt(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    return "".join(f"{_clean(s.text)}\n" for s in t.segments if _clean(s.text))


# --- subtitles ---------------------------------------------------------------


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
    words = [w for w in segment.words if _clean_word(w.word).strip()]
    if not words and _clean(segment.text):
        words = [Word(segment.start, segment.end, " " + _clean(segment.text), 1.0)]
    return [
        Word(_seconds(w.start), _seconds(w.end), _clean_word(w.word), w.probability) for w in words
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
    last_end = _milliseconds(cue[0].start)
    for index, word in enumerate(cue):
        start, end = _milliseconds(word.start), _milliseconds(word.end)
        if start != last_end:
            yield _Cue(last_end, start, plain)
        marked = "".join(_underlined(p.text) if i == index else p.text for i, p in enumerate(cue))
        yield _Cue(start, end, marked)
        last_end = end


def _subtitle_cues(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> list[_Cue]:
    """The cues srt and vtt both write: per segment, or laid out from words."""
    if not has_words(t):
        return [
            _Cue(_milliseconds(s.start), _milliseconds(s.end), _clean(s.text))
            for s in t.segments
            if _clean(s.text)
        ]
    cues: list[_Cue] = []
    for placed in _word_cues(t, options):
        if options.highlight_words:
            cues += _highlighted(placed)
        else:
            text = "".join(p.text for p in placed)
            cues.append(_Cue(_milliseconds(placed[0].start), _milliseconds(placed[-1].end), text))
    return cues


def render_srt(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    def clock(ms: int) -> str:
        return _clock(ms, always_hours=True, marker=",")

    return "".join(
        f"{number}\n{clock(c.start_ms)} --> {clock(c.end_ms)}\n{c.text}\n\n"
        for number, c in enumerate(_subtitle_cues(t, options), start=1)
    )


def render_vtt(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    def clock(ms: int) -> str:  # hours only when there are any, as openai-whisper writes
        return _clock(ms, always_hours=False, marker=".")

    cues = _subtitle_cues(t, options)
    return "WEBVTT\n\n" + "".join(
        f"{clock(c.start_ms)} --> {clock(c.end_ms)}\n{c.text}\n\n" for c in cues
    )


# --- tsv and json ------------------------------------------------------------


def _tsv_row(start: float, end: float, text: str) -> str:
    return f"{_milliseconds(start)}\t{_milliseconds(end)}\t{_clean(text)}"


def _tsv_rows_of(segment: Segment, per_word: bool) -> list[str]:
    if per_word and segment.words:
        return [_tsv_row(w.start, w.end, w.word) for w in segment.words if _clean(w.word)]
    return [_tsv_row(segment.start, segment.end, segment.text)] if _clean(segment.text) else []


def render_tsv(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    """openai-whisper's tsv (integer milliseconds); one row per word on request."""
    rows = ["start\tend\ttext"]
    for segment in t.segments:
        rows += _tsv_rows_of(segment, options.word_level_tsv)
    return "\n".join(rows) + "\n"


def _number(value: float | None) -> float | None:
    """A float for JSON; null where a backend could not measure it (or got NaN)."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def word_json(w: Word) -> dict[str, Any]:
    return {
        "word": w.word,
        "start": _seconds(w.start),
        "end": _seconds(w.end),
        "probability": _number(w.probability),
    }


def segment_json(s: Segment, with_words: bool) -> dict[str, Any]:
    """openai-whisper's segment: these keys, in its order, with its types."""
    fields: dict[str, Any] = {
        "id": int(s.id),
        "seek": int(s.seek),
        "start": _seconds(s.start),
        "end": _seconds(s.end),
        "text": s.text,
        "tokens": [int(token) for token in s.tokens],
        "temperature": _number(s.temperature),
        "avg_logprob": _number(s.avg_logprob),
        "compression_ratio": _number(s.compression_ratio),
        "no_speech_prob": _number(s.no_speech_prob),
    }
    if with_words:
        fields["words"] = [word_json(w) for w in s.words]
    return fields


def _kvscribe_json(t: Transcript) -> dict[str, Any]:
    """What kvscribe knows beyond openai-whisper's result."""
    return {
        "source": t.source,
        "duration": _seconds(t.duration),
        "language_probability": _number(t.language_probability),
        "segments": [{"id": int(s.id), "window": int(s.window)} for s in t.segments],
    }


def render_json(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    """openai-whisper's result dict; "words" in every segment when words were decoded."""
    return _dumps(_json_document(t), indent=2) + "\n"


def render_json_line(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    """render_json's document on one line: several files' documents on one stream are
    JSON Lines, one a line (its `kvscribe.source` says whose), not documents run together."""
    return _dumps(_json_document(t)) + "\n"


def _dumps(document: dict[str, Any], indent: int | None = None) -> str:
    """JSON in UTF-8 as written; where a file's name is not UTF-8 (its bytes held as lone
    surrogates, which UTF-8 cannot encode), everything escaped instead, so the name keeps its
    bytes and the file stays valid JSON."""
    text = json.dumps(document, ensure_ascii=False, indent=indent)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(document, indent=indent)
    return text


def _json_document(t: Transcript) -> dict[str, Any]:
    with_words = has_words(t)
    return {
        "text": t.text,
        "segments": [segment_json(s, with_words) for s in t.segments],
        "language": t.language,
        "kvscribe": _kvscribe_json(t),
    }


RENDERERS: dict[str, Renderer] = {
    "txt": render_txt,
    "srt": render_srt,
    "vtt": render_vtt,
    "json": render_json,
    "tsv": render_tsv,
}


def output_paths(out_dir: Path, stem: str, formats: tuple[str, ...]) -> list[Path]:
    return [out_dir / f"{stem}.{fmt}" for fmt in formats]


def write_outputs(
    t: Transcript,
    out_dir: Path,
    stem: str,
    formats: tuple[str, ...],
    options: WriterOptions = DEFAULT_OPTIONS,
) -> list[Path]:
    """Write every format for one transcript; each file appears whole or not at all."""
    rendered = {fmt: RENDERERS[fmt](t, options) for fmt in formats}  # all before touching disk
    written = []
    for fmt, path in zip(formats, output_paths(out_dir, stem, formats), strict=True):
        atomic_write_text(path, rendered[fmt])
        written.append(path)
    return written
