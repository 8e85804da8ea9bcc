"""A finished transcript as each of OpenAI's response formats sends it."""

from __future__ import annotations

import json
from typing import Any

from kvscribe.languages import language_name
from kvscribe.types import Transcript
from kvscribe.writers import render_srt, render_vtt, segment_json, word_json

MEDIA_TYPES = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}


def body(transcript: Transcript, response_format: str, task: str, stats: dict | None) -> str:
    """The response body; `stats` (the run's figures, asked for with kvscribe_stats=true)
    joins the JSON formats under "kvscribe"."""
    if response_format == "text":
        return transcript.text + "\n"
    if response_format == "srt":
        return render_srt(transcript)
    if response_format == "vtt":
        return render_vtt(transcript)
    document: dict[str, Any] = {"text": transcript.text}
    if response_format == "verbose_json":
        document = verbose(transcript, task)
    if stats is not None:
        document["kvscribe"] = stats
    return json.dumps(document, ensure_ascii=False)


def verbose(transcript: Transcript, task: str) -> dict[str, Any]:
    """OpenAI's verbose_json: openai-whisper's segments, and the words when they were asked
    for (timestamp_granularities[]=word)."""
    words = any(segment.words for segment in transcript.segments)
    document: dict[str, Any] = {
        "task": task,
        "language": language_name(transcript.language),
        "duration": round(transcript.duration, 3),
        "text": transcript.text,
        "segments": [segment_json(s, with_words=False) for s in transcript.segments],
        "usage": {"type": "duration", "seconds": round(transcript.duration, 3)},
    }
    if words:
        # OpenAI's words carry no leading space; openai-whisper's (and kvscribe's) do.
        document["words"] = [
            word_json(w) | {"word": w.word.strip()} for s in transcript.segments for w in s.words
        ]
    return document


def sse(event: dict[str, Any]) -> bytes:
    """One server-sent event as OpenAI streams a transcription's."""
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()
