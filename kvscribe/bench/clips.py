"""The clips a bench runs: a TSV manifest, or the two clips kvscribe ships (JFK, and 50 s of
real speech, so policies that trim have a window long enough to trim and long audio
reaches the batched path)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from kvscribe.audio import SAMPLE_RATE, load_audio
from kvscribe.errors import InputNotFoundError, UsageError


@dataclass(frozen=True)
class Clip:
    name: str
    audio: np.ndarray  # mono 16 kHz float32, decoded once
    reference: str

    @property
    def seconds(self) -> float:
        return self.audio.size / SAMPLE_RATE


def read_manifest(path: Path) -> list[Clip]:
    """TSV rows `audio<TAB>reference`: the reference is a text file's path or the text itself.
    Relative paths are relative to the manifest; `#` lines and an `audio` header are skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputNotFoundError(
            f"cannot read the manifest: {exc.strerror}", subject=str(path), hint="check the path"
        ) from None
    clips = []
    rows = csv.reader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE)
    for number, row in enumerate(rows, start=1):
        if not row or row[0].startswith("#") or row[0].strip().lower() == "audio":
            continue
        if len(row) < 2:
            raise UsageError(
                f"line {number} needs two tab-separated columns (audio, reference)",
                subject=str(path),
                hint="audio path<TAB>reference text or path to a .txt",
            )
        audio_path = (path.parent / row[0].strip()).resolve()
        clips.append(Clip(audio_path.name, load_audio(audio_path), _reference(path, row[1])))
    if not clips:
        raise UsageError("lists no clips", subject=str(path), hint="add audio<TAB>reference rows")
    return clips


def _reference(manifest: Path, value: str) -> str:
    candidate = manifest.parent / value.strip()
    if value.strip().endswith(".txt") and candidate.is_file():
        return candidate.read_text(encoding="utf-8")
    return value


# JFK four times over was the long clip once: its repeated text compresses 4.85 to 1, so
# every decode of its first window failed the fallback test and was retried at every
# temperature, and the bench timed the fallback, not the decoding it is about.
SHIPPED = ("jfk", "joined_real")  # 11 s; 50 s of 11 real recordings (two speech chunks)


def shipped() -> list[Clip]:
    """The clips packaged with kvscribe (kvscribe/data/SOURCE.md)."""
    data = resources.files("kvscribe.data")
    clips = []
    for name in SHIPPED:
        with resources.as_file(data / f"{name}.flac") as flac:
            audio = load_audio(flac)
        reference = (data / f"{name}.txt").read_text(encoding="utf-8").strip()
        clips.append(Clip(f"{name}.flac", audio, reference))
    return clips
