"""Audio decoding through PyAV (FFmpeg): any container/codec in, mono 16 kHz float32 out.

Decoding streams frame by frame through one resampler into a buffer that grows
geometrically, so memory stays at one float32 copy of the result (the array the
backend needs) plus one frame, never a list of chunks concatenated at the end.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvscribe import interrupts
from kvscribe.errors import AudioDecodeError, InputNotFoundError

SAMPLE_RATE = 16_000
# A file whose decodable audio ends this far before its declared length is truncated.
TRUNCATION_TOLERANCE_S = 0.5

AUDIO_EXTENSIONS = frozenset(
    [
        ".wav",
        ".flac",
        ".mp3",
        ".ogg",
        ".oga",
        ".opus",
        ".m4a",
        ".aac",
        ".wma",
        ".aif",
        ".aiff",
        ".amr",
        ".mka",
        ".webm",
        ".mp4",
        ".m4v",
        ".mkv",
        ".mov",
        ".avi",
        ".3gp",
    ]
)


@dataclass(frozen=True)
class AudioInfo:
    """What the container says about its first audio stream."""

    codec: str
    sample_rate: int
    channels: int
    declared_seconds: float | None


def check_readable(path: Path) -> None:
    """Raise InputNotFoundError unless `path` is a readable regular file."""
    if not path.exists():
        raise InputNotFoundError("no such file", subject=str(path), hint="check the path")
    if path.is_dir():
        raise InputNotFoundError("is a directory", subject=str(path), hint="pass the files in it")
    if not os.access(path, os.R_OK):
        raise InputNotFoundError("permission denied", subject=str(path), hint="make it readable")
    if path.stat().st_size == 0:
        raise AudioDecodeError(
            "empty file (0 bytes)", subject=str(path), hint="re-export the recording"
        )


def load_audio(path: Path) -> np.ndarray:
    """Decode `path` to a mono 16 kHz float32 array in [-1, 1].

    Raises InputNotFoundError for missing/unreadable files and AudioDecodeError
    for anything that is not complete, decodable audio.
    """
    check_readable(path)
    info, chunks = open_stream(path)
    audio = _collect(chunks, size_hint=info.declared_seconds)
    if audio.size == 0:
        raise AudioDecodeError(
            "contains no audio samples",
            subject=str(path),
            hint="the recording is empty; re-export it",
        )
    check_complete(path, info, audio.size / SAMPLE_RATE)
    non_finite = _count_non_finite(audio)
    if non_finite:
        raise non_finite_error(path, f"{non_finite} non-finite samples (NaN/inf)")
    return audio


def stream_audio(path: Path) -> Iterator[np.ndarray]:
    """Decode `path` lazily: mono 16 kHz float32 pieces of about GROUP_SAMPLES decoded
    samples each, so a long file replays in flat memory. Raises as load_audio does (decode
    errors when reached; a file shorter than its header says, at its end)."""
    check_readable(path)
    info, chunks = open_stream(path)
    decoded = 0  # samples before this chunk
    for chunk in chunks:
        bad = np.flatnonzero(~np.isfinite(chunk))
        if bad.size:  # the whole count would need the whole file: name where it starts
            at = (decoded + int(bad[0])) / SAMPLE_RATE
            raise non_finite_error(path, f"non-finite samples (NaN/inf) from {at:.2f} s")
        decoded += chunk.size
        yield chunk
    check_complete(path, info, decoded / SAMPLE_RATE)


def _count_non_finite(samples: np.ndarray, block: int = 1 << 20) -> int:
    """NaN and ±inf samples, counted a block at a time (no bool copy of a long recording)."""
    return sum(
        int(np.count_nonzero(~np.isfinite(samples[start : start + block])))
        for start in range(0, samples.size, block)
    )


def non_finite_error(path: Path, what: str) -> AudioDecodeError:
    """A float file can hold NaN/inf, which no recording does: every engine turns them into
    garbage text without an error, so they are corrupt audio, not silence."""
    return AudioDecodeError(f"{what}: the file is corrupt", subject=str(path), hint="re-export it")


def _a_wav_cut_after_its_header(path: Path) -> bool:
    """A WAV whose copy stopped at (or inside) its header: FFmpeg cannot open it at all."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(64)
    except OSError:
        return False
    return head[:4] == b"RIFF" and head[8:12] == b"WAVE" and len(head) <= 60


def open_stream(path: Path) -> tuple[AudioInfo, Iterator[np.ndarray]]:
    import av  # deferred: PyAV loads the FFmpeg libraries

    # FFmpeg logs decoder complaints straight to stderr; keep them off the
    # terminal but still attached to the exception ("last error log").
    av.logging.set_level(av.logging.PANIC)
    try:
        container = av.open(str(path))
    except av.error.FFmpegError as exc:
        if _a_wav_cut_after_its_header(path):
            raise AudioDecodeError(
                "incomplete: a WAV header with no audio after it",
                subject=str(path),
                hint="the file is truncated or damaged; copy or export it again",
            ) from exc
        raise AudioDecodeError(
            "not an audio or video file FFmpeg can read",
            subject=str(path),
            hint="convert it to WAV, FLAC or MP3",
        ) from exc
    if not container.streams.audio:
        container.close()
        raise AudioDecodeError(
            "has no audio track", subject=str(path), hint="pass a file with sound in it"
        )
    stream = container.streams.audio[0]
    info = AudioInfo(
        codec=stream.codec_context.name,
        sample_rate=stream.codec_context.sample_rate or 0,
        channels=stream.codec_context.channels or 0,
        declared_seconds=_declared_seconds(path, container, stream),
    )
    return info, _decode(container, stream, path)


# Decoded frames are resampled in groups of at least this many samples: FFmpeg's frames
# hold 100-1000 samples (a 6-minute 8 kHz telephone WAV: 17,136 frames), and a resample
# call per frame took load_audio of that file 0.33 s against 0.15 s grouped (same
# samples). faster-whisper groups its frames the same way.
GROUP_SAMPLES = 8192


def _decode(container, stream, path: Path) -> Iterator[np.ndarray]:
    import av

    frames = _TimedFrames(container.decode(stream))
    try:
        # PyAV's resampler can swallow a Ctrl-C or SIGTERM raised inside it (kvscribe.interrupts)
        yield from interrupts.unswallowed(_resampled(_grouped(frames, GROUP_SAMPLES)))
    except av.error.FFmpegError as exc:
        raise AudioDecodeError(
            f"corrupt audio data near {frames.seconds:.1f} s",
            subject=str(path),
            hint="re-export or repair the file",
        ) from exc
    finally:
        container.close()


def _resampled(groups: Iterator) -> Iterator[np.ndarray]:
    """Mono 16 kHz float32 samples of `groups`. A resampler takes one input format, and a
    stream may change it (MP3 files of two sample rates joined): each run of one format
    gets its own, flushed when the next begins."""
    import av

    resampler, shape = None, None
    for group in groups:
        if (group.format.name, group.layout.name, group.sample_rate) != shape:
            if resampler is not None:
                yield from _samples(resampler.resample(None))
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            shape = (group.format.name, group.layout.name, group.sample_rate)
        yield from _samples(resampler.resample(group))
    if resampler is not None:
        yield from _samples(resampler.resample(None))


def _samples(frames) -> Iterator[np.ndarray]:
    for frame in frames:
        yield frame.to_ndarray().reshape(-1)


class _TimedFrames:
    """Decoded frames, remembering the last one's time (where a decode error is reported)."""

    def __init__(self, frames: Iterator):
        self.frames, self.seconds = frames, 0.0

    def __iter__(self) -> Iterator:
        for frame in self.frames:
            self.seconds = float(frame.time or self.seconds)
            yield frame


def _grouped(frames, size: int) -> Iterator:
    """`frames` joined into frames of at least `size` samples (the last may be shorter),
    in order; a change of format, layout or rate mid-stream starts a new group."""
    import av

    fifo = av.AudioFifo()
    for frame in frames:
        frame.pts = None  # the fifo checks timestamps follow on; the samples are what count
        try:
            fifo.write(frame)
        except ValueError:  # not the fifo's format: what it holds goes first
            if fifo.samples:
                yield fifo.read()
            fifo = av.AudioFifo()
            fifo.write(frame)
        if fifo.samples >= size:
            yield fifo.read()
    if fifo.samples:
        yield fifo.read()


def _collect(chunks: Iterator[np.ndarray], size_hint: float | None) -> np.ndarray:
    capacity = int((size_hint or 30.0) * SAMPLE_RATE) + SAMPLE_RATE
    buffer = np.empty(capacity, dtype=np.float32)
    used = 0
    for chunk in chunks:
        if used + chunk.size > buffer.size:
            grown = np.empty(max(buffer.size * 2, used + chunk.size), dtype=np.float32)
            grown[:used] = buffer[:used]
            buffer = grown
        buffer[used : used + chunk.size] = chunk
        used += chunk.size
    return buffer[:used].copy() if used < buffer.size // 2 else buffer[:used]


def _declared_seconds(path: Path, container, stream) -> float | None:
    """Length the file claims to have, from the RIFF header for WAV, else from FFmpeg."""
    riff = _riff_data_seconds(path)
    if riff is not None:
        return riff
    if stream.duration is not None and stream.time_base is not None:
        seconds = float(stream.duration * stream.time_base)
    elif container.duration is not None:
        seconds = container.duration / 1_000_000
    else:
        return None
    return None if _guessed_from_bitrate(path, container, stream, seconds) else seconds


def _guessed_from_bitrate(path: Path, container, stream, seconds: float) -> bool:
    """Whether FFmpeg's length of an MP3 is the file's size over its first frame's bit rate
    (no Xing/Info frame count it could trust): an estimate, off by half for MP3s of two
    rates joined, and then no grounds to call the file truncated."""
    if container.format.name != "mp3" or not stream.bit_rate:
        return False
    guess = path.stat().st_size * 8 / stream.bit_rate
    return abs(guess - seconds) <= 0.02 * max(seconds, 1.0)


def _riff_data_seconds(path: Path) -> float | None:
    """Seconds the WAV `data` chunk declares (FFmpeg silently clamps this to the file size)."""
    with open(path, "rb") as handle:
        header = handle.read(4096)
    if header[:4] != b"RIFF" or header[8:12] != b"WAVE":
        return None
    fmt_at, data_at = header.find(b"fmt "), header.find(b"data")
    if fmt_at < 0 or data_at < 0 or len(header) < fmt_at + 24 or len(header) < data_at + 8:
        return None
    byte_rate = struct.unpack_from("<I", header, fmt_at + 16)[0]
    data_bytes = struct.unpack_from("<I", header, data_at + 4)[0]
    if byte_rate == 0 or data_bytes in (0, 0xFFFFFFFF):  # 0/-1: streamed WAV of unknown size
        return None
    return data_bytes / byte_rate


def check_complete(path: Path, info: AudioInfo, decoded_seconds: float) -> None:
    declared = info.declared_seconds
    if declared is None:
        return
    if decoded_seconds + TRUNCATION_TOLERANCE_S + 0.01 * declared < declared:
        raise AudioDecodeError(
            f"incomplete: the header says {declared:.1f} s but only {decoded_seconds:.1f} s decode",
            subject=str(path),
            hint="the file is truncated or damaged; copy or export it again",
        )
