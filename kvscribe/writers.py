"""Transcript writers: txt, srt, vtt, json, tsv, with openai-whisper's conventions.

Files are named `<stem>.<ext>` and written atomically: a temp file in the same
folder, fsync, then rename, so an interrupted run never leaves half a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from kvscribe.errors import OutputError
from kvscribe.types import Transcript

FORMATS = ("txt", "srt", "vtt", "json", "tsv")


def timestamp(seconds: float, *, always_hours: bool = True, marker: str = ".") -> str:
    """`HH:MM:SS.mmm` (hours optional when zero), rounded to the millisecond."""
    total_ms = max(0, round(seconds * 1000))
    hours, rest = divmod(total_ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, ms = divmod(rest, 1000)
    head = f"{hours:02d}:" if always_hours or hours else ""
    return f"{head}{minutes:02d}:{secs:02d}{marker}{ms:03d}"


def _clean(text: str) -> str:
    # A cue may not contain "-->" (it would read as a timing line) nor blank lines.
    return " ".join(text.replace("-->", "->").split())


def render_console_line(start: float, end: float, text: str) -> str:
    """The line printed on stdout as a segment is decoded (openai-whisper's verbose form)."""
    span = f"{timestamp(start, always_hours=False)} --> {timestamp(end, always_hours=False)}"
    return f"[{span}]  {_clean(text)}"


def render_txt(t: Transcript) -> str:
    return "".join(f"{_clean(s.text)}\n" for s in t.segments if _clean(s.text))


def render_srt(t: Transcript) -> str:
    cues = []
    for number, s in enumerate((s for s in t.segments if _clean(s.text)), start=1):
        span = f"{timestamp(s.start, marker=',')} --> {timestamp(s.end, marker=',')}"
        cues.append(f"{number}\n{span}\n{_clean(s.text)}\n")
    return "\n".join(cues)


def render_vtt(t: Transcript) -> str:
    cues = [
        f"{timestamp(s.start)} --> {timestamp(s.end)}\n{_clean(s.text)}\n"
        for s in t.segments
        if _clean(s.text)
    ]
    return "WEBVTT\n\n" + "\n".join(cues)


def render_tsv(t: Transcript) -> str:
    rows = ["start\tend\ttext"]
    rows += [
        f"{round(s.start * 1000)}\t{round(s.end * 1000)}\t{_clean(s.text)}"
        for s in t.segments
        if _clean(s.text)
    ]
    return "\n".join(rows) + "\n"


def render_json(t: Transcript) -> str:
    document = {
        "text": t.text,
        "language": t.language,
        "duration": round(t.duration, 3),
        "segments": [
            {
                "id": s.id,
                "start": round(s.start, 3),
                "end": round(s.end, 3),
                "text": s.text,
                "tokens": list(s.tokens),
                "avg_logprob": s.avg_logprob,
                "no_speech_prob": s.no_speech_prob,
            }
            for s in t.segments
        ],
    }
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


RENDERERS: dict[str, Callable[[Transcript], str]] = {
    "txt": render_txt,
    "srt": render_srt,
    "vtt": render_vtt,
    "json": render_json,
    "tsv": render_tsv,
}


def output_paths(out_dir: Path, stem: str, formats: tuple[str, ...]) -> list[Path]:
    return [out_dir / f"{stem}.{fmt}" for fmt in formats]


def write_outputs(t: Transcript, out_dir: Path, stem: str, formats: tuple[str, ...]) -> list[Path]:
    """Write every format for one transcript; each file appears whole or not at all."""
    rendered = {fmt: RENDERERS[fmt](t) for fmt in formats}  # render all before touching disk
    written = []
    for fmt, path in zip(formats, output_paths(out_dir, stem, formats), strict=True):
        atomic_write_text(path, rendered[fmt])
        written.append(path)
    return written


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` via a temp file and rename; clean up on any failure."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise OutputError(
            f"cannot write here: {exc.strerror}",
            subject=str(path),
            hint="choose another --output-dir or fix its permissions",
        ) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise OutputError(
                f"write failed: {exc.strerror}",
                subject=str(path),
                hint="free some disk space or choose another --output-dir",
            ) from exc
        raise
