"""Whisper's log-mel front end, computed here: Slaney mel filters and the log/clamp/scale.

Matches openai-whisper: 400-sample Hann STFT, hop 160, power spectrum, mel
filters (librosa's Slaney formula), log10 clamped at 1e-10, floored 8 below
the maximum, then (x + 4) / 4.
"""

from __future__ import annotations

import numpy as np

from kvscribe.audio import SAMPLE_RATE

N_FFT = 400
HOP = 160
FRAMES_PER_SECOND = SAMPLE_RATE // HOP  # 100: the unit of Segment.seek
FRAMES_PER_WINDOW = 3000  # 30 s
SAMPLES_PER_WINDOW = FRAMES_PER_WINDOW * HOP
ENCODER_MARGIN = 2.0  # seconds of padding a shorter encoder window keeps after the audio
# A shorter window's length is a multiple of this (frames): every new shape costs the
# engine memory it keeps (a live replay held 217 MB more at its end with any even length).
ENCODER_STEP = 2 * FRAMES_PER_SECOND


def encoder_frames(seconds: float, floor: float) -> int:
    """The log-mel frames of an encoder window for `seconds` of audio: its length and
    ENCODER_MARGIN, at least `floor` seconds, rounded up to ENCODER_STEP, at most
    Whisper's 30 s."""
    wanted = max(seconds + ENCODER_MARGIN, floor) * FRAMES_PER_SECOND
    return min(FRAMES_PER_WINDOW, ENCODER_STEP * int(np.ceil(wanted / ENCODER_STEP)))


def mel_filters(n_mels: int, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """[n_mels, n_fft // 2 + 1] float32 triangular filters, Slaney-normalised."""
    fft_freqs = np.linspace(0, sample_rate / 2, 1 + n_fft // 2)
    mel_points = np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2)
    hz_points = _mel_to_hz(mel_points)
    spacing = np.diff(hz_points)
    ramps = hz_points[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / spacing[:-1, None]
    upper = ramps[2:] / spacing[1:, None]
    weights = np.maximum(0, np.minimum(lower, upper))
    weights *= (2.0 / (hz_points[2:] - hz_points[:-2]))[:, None]
    return weights.astype(np.float32)


def _hz_to_mel(hz):
    hz = np.asarray(hz, dtype=np.float64)
    linear = 3.0 * hz / 200.0
    log_part = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(hz >= 1000.0, log_part, linear)


def _mel_to_hz(mel):
    mel = np.asarray(mel, dtype=np.float64)
    linear = 200.0 * mel / 3.0
    log_part = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
    return np.where(mel >= 15.0, log_part, linear)


def log_mel(audio, n_mels: int, pad_seconds: float = 30.0):
    """Log-mel of mono 16 kHz `audio` (numpy or torch), padded with `pad_seconds` of silence.

    Returns a torch float32 tensor [n_mels, frames], on the audio's device.
    """
    import torch

    samples = torch.as_tensor(audio, dtype=torch.float32)
    if pad_seconds:
        samples = torch.nn.functional.pad(samples, (0, int(pad_seconds * SAMPLE_RATE)))
    window = torch.hann_window(N_FFT, device=samples.device)
    spectrum = torch.stft(samples, N_FFT, HOP, window=window, return_complex=True)
    power = spectrum[..., :-1].abs() ** 2
    filters = torch.from_numpy(mel_filters(n_mels)).to(samples.device)
    mel = torch.clamp(filters @ power, min=1e-10).log10()
    mel = torch.maximum(mel, mel.max() - 8.0)
    return (mel + 4.0) / 4.0
