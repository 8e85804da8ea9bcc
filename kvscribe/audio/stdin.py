"""Audio piped on stdin (`kvscribe -`) or through a named pipe (`kvscribe <(ffmpeg ...)`,
a FIFO), spooled to a temporary file first.

The rest of kvscribe reads files: probing the container, checking the file is
complete, batch manifests and workers all need one. Copying the pipe to disk in
blocks keeps memory flat however long the recording is. Raw PCM has no header
to probe, so `--input-format` names it and the spool gets a WAV header. A spool that a
killed run left behind (named by its process id) is removed by the next run that spools
(kvscribe/process_spools.py).
"""

from __future__ import annotations

import itertools
import os
import shutil
import stat
import struct
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import BinaryIO

from kvscribe.audio import SAMPLE_RATE
from kvscribe.errors import AudioDecodeError, UsageError, shown_as
from kvscribe.process_spools import prefix, spool_folder

DEFAULT_NAME = "stdin"
SPOOL_PREFIX = prefix("stdin")  # the temporary folder a pipe's audio is spooled into
# Raw PCM on stdin: 16 kHz mono, as `kvscribe mic --input -` and whisper.cpp take it.
# name -> (WAV format tag, bits per sample): 1 = integer PCM, 3 = IEEE float.
RAW_FORMATS = {"s16le": (1, 16), "f32le": (3, 32)}
_BLOCK = 1 << 20
# A stream's first bytes where raw samples were asked for: read as samples a container is
# noise, and the run ends with no text or with "corrupt audio" for the wrong reason.
_CONTAINERS = {
    b"ID3": "an MP3 file",
    b"OggS": "an Ogg file",
    b"fLaC": "a FLAC file",
    b"\x1aE\xdf\xa3": "a Matroska or WebM file",
}


def container_in(head: bytes) -> str | None:
    """The container a stream's first bytes start, or None: raw samples, or a WAV of 16 kHz
    mono 16-bit (its header alone reads as 22 samples of quiet noise)."""
    kind = next((name for magic, name in _CONTAINERS.items() if head.startswith(magic)), None)
    if kind is None and head[4:8] == b"ftyp":
        kind = "an MP4 or M4A file"
    if kind is None and head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        fmt = head.find(b"fmt ")
        pcm16 = fmt >= 0 and len(head) >= fmt + 24
        if pcm16:
            tag, channels, rate = struct.unpack_from("<HHI", head, fmt + 8)
            bits = struct.unpack_from("<H", head, fmt + 22)[0]
            pcm16 = (tag, channels, rate, bits) == (1, 1, SAMPLE_RATE, 16)
        kind = None if pcm16 else "a WAV file of another rate, width or channel count"
    return kind


@contextmanager
def spooled(
    stream: BinaryIO, name: str | None, input_format: str | None, source: str | None = None
) -> Iterator[Path]:
    """A file holding everything read from `stream`, deleted on exit. Its stem is `name`
    (default "stdin"), which is what output files are named after; errors about it name
    `source` (default "stdin": the pipe's path for a named pipe)."""
    if input_format is not None and input_format not in RAW_FORMATS:
        raise UsageError(
            f"unknown raw format {input_format!r}",
            subject="--input-format",
            hint=f"use {' or '.join(RAW_FORMATS)} (16 kHz mono); a container (wav, mp3, ...) "
            "needs no --input-format",
        )
    with spool_folder("stdin") as folder:
        path = folder / f"{name or DEFAULT_NAME}.audio"
        with path.open("wb") as out:
            if input_format is None:
                shutil.copyfileobj(stream, out, _BLOCK)
            else:
                head = stream.read(_BLOCK)
                _refuse_a_container(head, input_format, source)
                _write_wav(head, stream, out, *RAW_FORMATS[input_format])
        if path.stat().st_size == 0:
            raise _nothing_arrived(source)
        with shown_as(path, source or "stdin"):
            yield path


def _nothing_arrived(source: str | None) -> AudioDecodeError:
    if source is None:
        return AudioDecodeError(
            "nothing arrived on stdin",
            subject="-",
            hint="pipe audio in, e.g. cat talk.mp3 | kvscribe -",
        )
    return AudioDecodeError(
        "nothing arrived through the pipe",
        subject=source,
        hint="check the command that writes into it",
    )


def is_pipe(path: str | Path) -> bool:
    """A named pipe: `<(ffmpeg ...)` in a shell is /dev/fd/63, which reads once and has no
    size (it was "an empty file")."""
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def check_read_once(
    inputs: Sequence[str], output_name: str | None, input_format: str | None
) -> None:
    """Audio read once (stdin, "-", or a named pipe) with the options that name and read it:
    stdin is one input; --output-name and --input-format apply to one such input. (A pipe
    among other inputs into a folder is refused where pipes are read: spooled_pipes; no
    input is looked at here unless those options are given, since options are checked
    each time they are copied.)"""
    stdin = "-" in inputs
    named = output_name is not None or input_format is not None
    one_pipe = named and len(inputs) == 1 and is_pipe(inputs[0])
    if not stdin and not one_pipe:
        for flag, value in (("--output-name", output_name), ("--input-format", input_format)):
            if value is not None:
                raise UsageError(
                    "only applies to audio read from stdin or one pipe",
                    subject=flag,
                    hint="pass '-' as the input",
                )
        return
    if stdin and len(inputs) > 1:
        raise UsageError(
            "stdin ('-') is one input: it cannot be mixed with others",
            subject="-",
            hint="run kvscribe once for the piped audio and once for the files",
        )
    if output_name is not None and ("/" in output_name or not output_name.strip(".")):
        raise UsageError(
            "must be a plain file name stem",
            subject="--output-name",
            hint=f"got {output_name!r}; e.g. --output-name talk",
        )


@contextmanager
def spooled_pipes(
    inputs: Sequence[str | Path], name: str | None, input_format: str | None, to_folder: bool
) -> Iterator[tuple[str | Path, ...]]:
    """`inputs` with each named pipe among them replaced by its spool, all deleted on exit;
    other inputs as they are. A pipe's spool is named `name` (else after the pipe) and read
    as `input_format` (the options allow both for one input only); errors name the pipe.
    Into an output folder a pipe is one input: its spool's temporary folder names nothing."""
    pipes = [entry for entry in inputs if is_pipe(entry)]
    if pipes and to_folder and len(inputs) > 1:
        raise UsageError(
            "a pipe is one input with --output-dir: it cannot be mixed with others",
            subject=str(pipes[0]),
            hint="run kvscribe once per pipe, naming its outputs with --output-name",
        )
    with ExitStack() as stack:
        replaced = []
        for entry in inputs:
            if entry in pipes:
                with open(entry, "rb") as stream:
                    stem = name or Path(entry).stem or None
                    spool = spooled(stream, stem, input_format, source=str(entry))
                    entry = stack.enter_context(spool)
            replaced.append(entry)
        yield tuple(replaced)


def _refuse_a_container(head: bytes, input_format: str, source: str | None) -> None:
    kind = container_in(head)
    if kind is not None:
        raise AudioDecodeError(
            f"holds {kind}, not raw {input_format} samples (--input-format {input_format})",
            subject=source or "stdin",
            hint="leave out --input-format: kvscribe reads a container itself",
        )


def _write_wav(head: bytes, stream: BinaryIO, out: BinaryIO, tag: int, bits: int) -> None:
    """Raw little-endian samples (`head`, then the rest of `stream`) -> a mono 16 kHz WAV
    (header rewritten once the size is known)."""
    out.write(b"\0" * 44)
    data = 0
    for block in itertools.chain([head], iter(lambda: stream.read(_BLOCK), b"")):
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
