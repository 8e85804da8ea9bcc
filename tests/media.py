"""Make test media from the shipped sample with PyAV: other codecs, stereo, video,
and broken files (empty, not audio, truncated, corrupt)."""

from __future__ import annotations

import random
import wave
from pathlib import Path

import av
import numpy as np

from kvscribe.audio import load_audio


def encode(
    samples: np.ndarray,
    rate: int,
    dst: Path,
    codec: str,
    *,
    container: str | None = None,
    channels: int = 1,
    with_video: bool = False,
) -> Path:
    """Encode float32 mono `samples` at `rate` into `dst` (duplicated to `channels`)."""
    layout = "stereo" if channels == 2 else "mono"
    with av.open(str(dst), "w", format=container) as out:
        stream = out.add_stream(codec, rate=rate, layout=layout)
        video = _add_video(out) if with_video else None
        frame_size = stream.codec_context.frame_size or 1024
        fmt = stream.codec_context.format.name
        planar = np.repeat(samples[None, :], channels, axis=0).astype(np.float32)
        resampler = av.AudioResampler(format=fmt, layout=layout, rate=rate)
        for start in range(0, planar.shape[1], frame_size):
            frame = av.AudioFrame.from_ndarray(
                np.ascontiguousarray(planar[:, start : start + frame_size]),
                format="fltp",
                layout=layout,
            )
            frame.sample_rate = rate
            for converted in resampler.resample(frame):
                out.mux(stream.encode(converted))
        out.mux(stream.encode(None))
        if video is not None:
            _write_video(out, video, seconds=samples.size / rate)
    return dst


def _add_video(out):
    stream = out.add_stream("mpeg4", rate=5)
    stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
    return stream


def _write_video(out, stream, seconds: float) -> None:
    for _ in range(int(seconds * 5)):
        frame = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), format="rgb24")
        out.mux(stream.encode(frame))
    out.mux(stream.encode(None))


def resample_linear(samples: np.ndarray, rate: int) -> np.ndarray:
    positions = np.arange(int(samples.size * rate / 16000)) * 16000 / rate
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)


# Each container the tests read: its sample rate, codec, file name's ending and encode()'s
# keywords.
_CONTAINERS = {
    "flac": (16000, "flac", ".flac", {}),
    "mp3": (44100, "libmp3lame", ".mp3", {}),
    "ogg": (48000, "libopus", ".ogg", {}),
    "m4a": (44100, "aac", ".m4a", {"container": "mp4"}),
    "stereo_wav": (44100, "pcm_s16le", "_stereo.wav", {"channels": 2}),
    "video_mp4": (44100, "aac", "_video.mp4", {"container": "mp4", "with_video": True}),
}


def encoded(
    mono: np.ndarray, folder: Path, stem: str, kinds: tuple[str, ...] = tuple(_CONTAINERS)
) -> dict[str, Path]:
    """16 kHz `mono` in each container of `kinds` (see _CONTAINERS), at its sample rate."""
    at_rate = {16000: mono}
    files = {}
    for kind in kinds:
        rate, codec, ending, keywords = _CONTAINERS[kind]
        if rate not in at_rate:
            at_rate[rate] = resample_linear(mono, rate)
        files[kind] = encode(at_rate[rate], rate, folder / f"{stem}{ending}", codec, **keywords)
    return files


def make_all(sample: Path, folder: Path) -> dict[str, Path]:
    files = encoded(load_audio(sample), folder, "jfk")
    raw = sample.read_bytes()
    flac = files["flac"].read_bytes()
    broken = {
        "empty": b"",
        "not_audio": b"Minutes of the meeting, 3 May.\nNothing was decided.\n" * 20,
        "header_only": raw[:44],
        "truncated_wav": raw[: len(raw) // 2],
        "truncated_mp3": files["mp3"].read_bytes()[: files["mp3"].stat().st_size // 2],
        "corrupt_flac": _flip_bytes(flac, start=len(flac) // 3),
    }
    names = {
        "empty": "empty.wav",
        "not_audio": "notes.wav",
        "header_only": "header_only.wav",
        "truncated_wav": "truncated.wav",
        "truncated_mp3": "truncated.mp3",
        "corrupt_flac": "corrupt.flac",
    }
    for key, data in broken.items():
        path = folder / names[key]
        path.write_bytes(data)
        files[key] = path
    files["zero_samples"] = _empty_wav(folder / "zero_samples.wav")
    return files


def _empty_wav(path: Path) -> Path:
    """A valid WAV header announcing zero samples."""
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(16000)
    return path


def _flip_bytes(data: bytes, start: int) -> bytes:
    damaged = bytearray(data)
    rng = random.Random(7)
    for i in range(start, len(damaged) - 64, 211):
        damaged[i] = rng.randrange(256)
    return bytes(damaged)


def paused_clip(clips: list[Path], silence: float, dst: Path) -> list[tuple[float, float]]:
    """Write `clips` one after another with `silence` seconds of digital silence before,
    between and after them, as a 16-bit WAV at `dst`; return each silence's (start, end)."""
    gap = np.zeros(int(silence * 16000), dtype=np.float32)
    parts, silences, at = [gap], [(0.0, silence)], silence
    for clip in clips:
        samples = load_audio(clip)
        parts += [samples, gap]
        at += samples.size / 16000
        silences.append((at, at + silence))
        at += silence
    write_wav(dst, np.concatenate(parts))
    return silences


def write_wav(path: Path, samples: np.ndarray, rate: int = 16_000) -> Path:
    """`samples` (float, -1..1) as a mono 16-bit WAV at `path`."""
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(2)
        handle.setframerate(rate)
        handle.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return path
