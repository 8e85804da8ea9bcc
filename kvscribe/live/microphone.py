"""Microphones through sounddevice (PortAudio): listing, picking one, and capturing from it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.errors import BackendUnavailableError, InputNotFoundError, UsageError

# An open device delivers a block every 0.1-2 s (a null sink: 2 s blocks); none for this long:
# it is gone.
STALL_SECONDS = 10.0
_HINT_NO_DEVICE = "plug one in, pick one with --mic (see --list-devices), or use --input FILE|-"


@dataclass(frozen=True)
class InputDevice:
    index: int
    name: str
    host_api: str
    channels: int
    default_rate: float
    is_default: bool


def _sounddevice() -> Any:
    try:
        import sounddevice
    except ImportError:
        raise BackendUnavailableError(
            "sounddevice is not installed",
            subject="microphone",
            hint="pip install sounddevice, or use --input FILE|-",
        ) from None
    except OSError:  # the package is there, the PortAudio library is not
        raise BackendUnavailableError(
            "the PortAudio library is not installed",
            subject="microphone",
            hint="apt-get install libportaudio2 (Debian/Ubuntu), or use --input FILE|-",
        ) from None
    return sounddevice


def input_devices() -> list[InputDevice]:
    """Every device that can record, in PortAudio's order."""
    sd = _sounddevice()
    default = sd.default.device[0]
    apis = [api["name"] for api in sd.query_hostapis()]
    return [
        InputDevice(
            index,
            info["name"],
            apis[info["hostapi"]],
            info["max_input_channels"],
            info["default_samplerate"],
            index == default,
        )
        for index, info in enumerate(sd.query_devices())
        if info["max_input_channels"] > 0
    ]


def pick(wanted: str | None) -> InputDevice:
    """The device named by --mic (index or part of its name), else the default input."""
    devices = input_devices()
    if not devices:
        raise InputNotFoundError("no microphone found", subject="microphone", hint=_HINT_NO_DEVICE)
    if wanted is None:
        return next((d for d in devices if d.is_default), devices[0])
    chosen = matching(devices, wanted)
    if len(chosen) != 1:
        names = ", ".join(f"{d.index}: {d.name}" for d in devices)
        problem = "matches several input devices" if chosen else "is not an input device"
        raise UsageError(f"{wanted!r} {problem}", subject="--mic", hint=f"one of {names}")
    return chosen[0]


def matching(devices: list[InputDevice], wanted: str) -> list[InputDevice]:
    """The devices --mic names: by index; else the one whose whole name it is (ALSA lists
    `default` beside `sysdefault`, Windows a microphone once per host API); else those
    whose name contains it."""
    if wanted.isdigit():
        return [d for d in devices if d.index == int(wanted)]
    exact = [d for d in devices if d.name.casefold() == wanted.casefold()]
    return exact or [d for d in devices if wanted.casefold() in d.name.casefold()]


class Microphone:
    """Records from one input device at 16 kHz mono (PortAudio resamples where the host can;
    otherwise the device's own rate is resampled here, linearly)."""

    live = True

    def __init__(self, device: InputDevice):
        self.device = device
        self.label = f"microphone {device.index}: {device.name}"
        self.overflows = 0

    def run(self, emit, stopped: threading.Event) -> None:
        sd = _sounddevice()
        rate = self._usable_rate(sd)

        heard = [time.monotonic()]  # when the device last delivered a block

        def callback(data, frames, _time, status) -> None:
            heard[0] = time.monotonic()
            if status.input_overflow:
                self.overflows += 1
            # A copy: PortAudio reuses `data` once the callback returns, and one float32
            # channel sliced out of it is still a view of that buffer.
            mono = np.array(data[:, 0], dtype=np.float32, copy=True)
            emit(mono if rate == SAMPLE_RATE else _resample(mono, rate))

        try:
            with sd.InputStream(
                samplerate=rate,
                channels=1,
                dtype="float32",
                blocksize=int(rate * 0.1),
                device=self.device.index,
                callback=callback,
            ):
                while not stopped.wait(0.5):
                    self._check_delivering(time.monotonic() - heard[0])
        except sd.PortAudioError as exc:
            raise InputNotFoundError(
                f"cannot record: {exc}", subject=self.label, hint=_HINT_NO_DEVICE
            ) from None

    def _check_delivering(self, silent_for: float) -> None:
        """A device unplugged (or suspended, or taken) mid-session stops calling back, and
        PortAudio says nothing: without this the session waited for good, committing nothing."""
        if silent_for > STALL_SECONDS:
            raise InputNotFoundError(
                f"the device delivered no audio for {silent_for:.0f} s (unplugged?)",
                subject=self.label,
                hint=_HINT_NO_DEVICE,
            )

    def _usable_rate(self, sd: Any) -> int:
        try:
            sd.check_input_settings(self.device.index, channels=1, samplerate=SAMPLE_RATE)
        except sd.PortAudioError:
            return int(self.device.default_rate)
        return SAMPLE_RATE


def _resample(samples: np.ndarray, rate: int) -> np.ndarray:
    """Device rate -> 16 kHz: a moving average as a crude low-pass against aliasing (block
    edges are not carried over: good enough for speech, not for music), then linear."""
    width = round(rate / SAMPLE_RATE)
    if width > 1:
        samples = np.convolve(samples, np.full(width, 1.0 / width), mode="same")
    count = round(samples.size * SAMPLE_RATE / rate)
    positions = np.linspace(0, samples.size - 1, count)
    return np.interp(positions, np.arange(samples.size), samples).astype(np.float32)
