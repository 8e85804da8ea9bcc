"""Transcript writers: txt, srt, vtt, json, tsv, with openai-whisper's conventions.

The JSON has openai-whisper's shape (top-level text/segments/language, its segment
fields, `words` when word timestamps were asked) with kvscribe's own fields in a
separate "kvscribe" object, so tools written for openai-whisper's JSON read it.
With words, srt/vtt cues are laid out as openai-whisper's SubtitlesWriter lays
them out (kvscribe/subtitles.py), from the same millisecond-rounded times the JSON
holds (kvscribe/text_layout.py), so openai-whisper's writers fed kvscribe's JSON
produce the same subtitles.

Files are named `<stem>.<ext>` and written atomically (kvscribe.atomic_file), so an
interrupted run never leaves half a file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Protocol

from kvscribe.atomic_file import atomic_write_text
from kvscribe.subtitles import render_srt, render_vtt
from kvscribe.text_layout import (
    DEFAULT_OPTIONS,
    WriterOptions,
    clean,
    has_words,
    milliseconds,
    seconds_as_written,
    timestamp,
)
from kvscribe.types import Segment, Transcript, Word

FORMATS = ("txt", "srt", "vtt", "json", "tsv")


class Renderer(Protocol):
    def __call__(self, t: Transcript, options: WriterOptions = DEFAULT_OPTIONS, /) -> str: ...


def render_console_line(start: float, end: float, text: str) -> str:
    """The line printed on stdout as a segment is decoded (openai-whisper's verbose form)."""
    span = f"{timestamp(start, always_hours=False)} --> {timestamp(end, always_hours=False)}"
    return f"[{span}]  {clean(text)}"


def render_txt(t: Transcript, options: WriterOptions = DEFAULT_OPTIONS) -> str:
    return "".join(f"{clean(s.text)}\n" for s in t.segments if clean(s.text))


# --- tsv and json ------------------------------------------------------------


def _tsv_row(start: float, end: float, text: str) -> str:
    return f"{milliseconds(start)}\t{milliseconds(end)}\t{clean(text)}"


def _tsv_rows_of(segment: Segment, per_word: bool) -> list[str]:
    if per_word and segment.words:
        return [_tsv_row(w.start, w.end, w.word) for w in segment.words if clean(w.word)]
    return [_tsv_row(segment.start, segment.end, segment.text)] if clean(segment.text) else []


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
        "start": seconds_as_written(w.start),
        "end": seconds_as_written(w.end),
        "probability": _number(w.probability),
    }


def segment_json(s: Segment, with_words: bool) -> dict[str, Any]:
    """openai-whisper's segment: these keys, in its order, with its types."""
    fields: dict[str, Any] = {
        "id": int(s.id),
        "seek": int(s.seek),
        "start": seconds_as_written(s.start),
        "end": seconds_as_written(s.end),
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
        "duration": seconds_as_written(t.duration),
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
