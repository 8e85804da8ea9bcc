"""Whisper's log-mel of a long recording, computed a slice of frames at a time.

A whole-file log-mel costs about 50 MB a minute of audio on the way (STFT, power,
mel): the reason long files used to need gigabytes. `StreamedMel` computes only
the frames a decoder asks for and still equals the whole-file features: each frame
reads the same padded samples (the reflection at the file's two ends, the zeros
appended after it), and the floor, 8 below the file's maximum, comes from one pass
over the file before the first window.

Two front ends, the two whole-file computations kvscribe matches: faster-whisper's
numpy FeatureExtractor (160 zeros appended) and kvscribe.audio.mel's torch version
(openai-whisper's: 30 s of zeros appended).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from kvscribe.audio.mel import HOP, N_FFT, SAMPLE_RATE
from kvscribe.audio.stream import Samples

SCAN_FRAMES = 3000  # frames per slice of the pass that finds the maximum (30 s)


class FrontEnd(Protocol):
    n_mels: int
    tail_pad: int  # zeros appended to the audio before framing

    def log10_mel(self, framed: np.ndarray):
        """log10 of the clamped mel power of every 400-sample frame of `framed` (already
        padded: no centring), [n_mels, frames], numpy or torch."""

    def finish(self, raw, floor: float):
        """max(raw, floor), scaled as Whisper expects: (x + 4) / 4."""


class NumpyFrontEnd:
    """faster-whisper's FeatureExtractor, frame for frame (`extractor`: an instance)."""

    def __init__(self, extractor):
        self.extractor = extractor
        self.n_mels = extractor.mel_filters.shape[0]
        self.tail_pad = 160  # FeatureExtractor.__call__'s default padding
        self._window = np.hanning(N_FFT + 1)[:-1].astype("float32")

    def log10_mel(self, framed: np.ndarray) -> np.ndarray:
        spectrum = self.extractor.stft(
            framed, N_FFT, HOP, window=self._window, center=False, return_complex=True
        ).astype("complex64")
        power = np.abs(spectrum) ** 2
        return np.log10(np.clip(self.extractor.mel_filters @ power, a_min=1e-10, a_max=None))

    def finish(self, raw: np.ndarray, floor: float) -> np.ndarray:
        return (np.maximum(raw, floor) + 4.0) / 4.0


class WhisperNumpyFrontEnd:
    """kvscribe.audio.mel.log_mel's arithmetic (openai-whisper's: 30 s of zeros appended, a periodic
    Hann window, power, mel filters, log10) in numpy, for an engine that runs without torch
    (backends/onnx): the same features as TorchFrontEnd up to float32 rounding."""

    def __init__(self, n_mels: int):
        from kvscribe.audio.mel import mel_filters

        self.n_mels = n_mels
        self.tail_pad = 30 * SAMPLE_RATE  # log_mel's pad_seconds
        self._window = np.hanning(N_FFT + 1)[:-1].astype(np.float32)
        self._filters = mel_filters(n_mels).astype(np.float32)

    def log10_mel(self, framed: np.ndarray) -> np.ndarray:
        frames = np.lib.stride_tricks.sliding_window_view(framed, N_FFT)[::HOP]
        spectrum = np.fft.rfft(frames * self._window, axis=-1)
        power = (spectrum.real**2 + spectrum.imag**2).astype(np.float32).T
        return np.log10(np.maximum(self._filters @ power, np.float32(1e-10)))

    def finish(self, raw: np.ndarray, floor: float) -> np.ndarray:
        return (np.maximum(raw, np.float32(floor)) + np.float32(4.0)) / np.float32(4.0)


class TorchFrontEnd:
    """kvscribe.audio.mel.log_mel (openai-whisper's), on `device`."""

    def __init__(self, n_mels: int, device: str = "cpu"):
        import torch

        from kvscribe.audio.mel import mel_filters

        self.n_mels = n_mels
        self.tail_pad = 30 * SAMPLE_RATE  # log_mel's pad_seconds
        self.device = device
        self._window = torch.hann_window(N_FFT, device=device)
        self._filters = torch.from_numpy(mel_filters(n_mels)).to(device)

    def log10_mel(self, framed: np.ndarray):
        import torch

        with torch.inference_mode():
            samples = torch.from_numpy(framed).to(self.device)
            spectrum = torch.stft(
                samples, N_FFT, HOP, window=self._window, center=False, return_complex=True
            )
            return torch.clamp(self._filters @ spectrum.abs() ** 2, min=1e-10).log10()

    def finish(self, raw, floor: float):
        import torch

        with torch.inference_mode():
            return (torch.clamp(raw, min=floor) + 4.0) / 4.0


class StreamedMel:
    """The log-mel [n_mels, frames] of `samples` under `front`, as an array that computes
    the frames it is sliced for (`mel[:, a:b]`, `mel[..., a:b]`); an open slice
    (`mel[..., a:]`) is another StreamedMel over the same audio."""

    def __init__(self, samples: Samples, front: FrontEnd, floor: float | None = None):
        self.samples = samples
        self.front = front
        self.total_frames = (samples.size + front.tail_pad) // HOP
        self.offset = 0
        self.floor = _maximum(self) - 8.0 if floor is None else floor

    @property
    def shape(self) -> tuple[int, int]:
        return (self.front.n_mels, self.total_frames - self.offset)

    @property
    def ndim(self) -> int:
        return 2

    def __getitem__(self, key):
        frames = key[-1] if isinstance(key, tuple) else slice(None)
        if isinstance(key, tuple) and key[0] not in (Ellipsis, slice(None)):
            raise TypeError("StreamedMel is sliced along frames only")
        start, stop, step = frames.indices(self.shape[1])
        if step != 1:
            raise ValueError("StreamedMel slices have no step")
        if frames.stop is None:  # open-ended: a view, computed when sliced again
            view = StreamedMel.__new__(StreamedMel)
            view.__dict__.update(self.__dict__, offset=self.offset + start)
            return view
        if stop <= start:  # no frames: one computed, none kept, in the front end's type
            return self.front.finish(self.raw(0, 1), self.floor)[:, :0]
        return self.front.finish(self.raw(self.offset + start, self.offset + stop), self.floor)

    def raw(self, first: int, end: int):
        """Unfloored log10 mel of absolute frames [first, end)."""
        return self.front.log10_mel(_framed(self.samples, self.front.tail_pad, first, end))


def _maximum(mel: StreamedMel) -> float:
    """The largest log10 mel value of the whole file (one pass, a slice at a time)."""
    best = -np.inf
    for first in range(0, mel.total_frames, SCAN_FRAMES):
        best = max(best, float(mel.raw(first, min(first + SCAN_FRAMES, mel.total_frames)).max()))
    return best


def _framed(samples: Samples, tail_pad: int, first: int, end: int) -> np.ndarray:
    """The samples frames [first, end) read, as a centred STFT of the whole file sees them:
    the file plus `tail_pad` zeros, reflected by N_FFT // 2 at both ends."""
    length = samples.size + tail_pad
    half = N_FFT // 2
    index = np.arange(first * HOP - half, (end - 1) * HOP + half)
    index = np.abs(index)  # reflection at the start
    over = index >= length
    index[over] = 2 * (length - 1) - index[over]  # reflection at the end
    real = index < samples.size
    out = np.zeros(index.size, dtype=np.float32)
    if real.any():
        low, high = int(index[real].min()), int(index[real].max()) + 1
        out[real] = samples[low:high][index[real] - low]
    return out
