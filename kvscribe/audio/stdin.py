"""Audio piped on stdin (`kvscribe -`), spooled to a temporary file first.

The rest of kvscribe reads files: probing the container, checking the file is
complete, batch manifests and workers all need one. Copying the pipe to disk in
blocks keeps memory flat however long the recording is. Raw PCM has no header
to probe, so `--input-format` names it and the spool gets a WAV header.
"""

from __future__ import annotations

import shutil
import struct
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from kvscribe.audio import SAMPLE_RATE
from kvscribe.errors import AudioDecodeError, UsageError, shown_as

DEFAULT_NAME = "stdin"
# Raw PCM on stdin: 16 kHz mono, as `kvscribe mic --input -` and whisper.cpp take it.
# name -> (WAV format tag, bits per sample): 1 = integer PCM, 3 = IEEE float.
RAW_FORMATS = {"s16le": (1, 16), "f32le": (3, 32)}
_BLOCK = 1 << 20


@contextmanager
def spooled(stream: BinaryIO, name: str | None, input_format: str | None) -> Iterator[Path]:
    """A file holding everything read from `stream`, deleted on exit. Its stem is `name`
    (default "stdin"), which is what output files are named after; errors about it name
    "stdin"."""
    if input_format is not None and input_format not in RAW_FORMATS:
        raise UsageError(
            f"unknown raw format {input_format!r}",
            subject="--input-format",
            hint=f"use {' or '.join(RAW_FORMATS)} (16 kHz mono); a container (wav, mp3, ...) "
            "needs no --input-format",
        )
    with tempfile.TemporaryDirectory(prefix="kvscribe-stdin-") as folder:
        path = Path(folder) / f"{name or DEFAULT_NAME}.audio"
        with path.open("wb") as out:
            if input_format is None:
                shutil.copyfileobj(stream, out, _BLOCK)
            else:
                _write_wav(stream, out, *RAW_FORMATS[input_format])
        if path.stat().st_size == 0:
            raise AudioDecodeError(
                "nothing arrived on stdin",
                subject="-",
                hint="pipe audio in, e.g. cat talk.mp3 | kvscribe -",
            )
        with shown_as(path, "stdin"):
            yield path


def _write_wav(stream: BinaryIO, out: BinaryIO, tag: int, bits: int) -> None:
    """Raw little-endian samples -> a mono 16 kHz WAV (header rewritten once the size is known)."""
    out.write(b"\0" * 44)
    data = 0
    while block := stream.read(_BLOCK):
        out.write(block)
        data += len(block)
    frame = bits // 8
    if data % frame:  # a cut-off last sample: drop it rather than misread the rest
        out.truncate(44 + data - data % frame)
        data -= data % frame
    if data == 0:
        out.truncate(0)
        return
    out.seek(0)
    out.write(_wav_header(data, tag, bits))


def _wav_header(data_bytes: int, tag: int, bits: int) -> bytes:
    frame = bits // 8
    fmt = struct.pack("<HHIIHH", tag, 1, SAMPLE_RATE, SAMPLE_RATE * frame, frame, bits)
    return (
        b"RIFF"
        + struct.pack("<I", 36 + data_bytes)
        + b"WAVEfmt "
        + struct.pack("<I", len(fmt))
        + fmt
        + b"data"
        + struct.pack("<I", data_bytes)
    )
