"""faster-whisper's VAD filter (`get_speech_timestamps`, silero v6) fed a block at a time.

faster-whisper's own function takes the whole file as one array (an hour: 230 MB of
samples, padded again). This module gives the same speech timestamps, to the sample, from
any Samples read in blocks, except after a run of digital silence of 5 s or more, where
kvscribe's front end starts afresh and faster-whisper's loses words (SILENCE_RESET_WINDOWS
in kvscribe/voice/silero.py). The probabilities come from the silero model faster-whisper
ships, fed the windows its `SileroVADModel` would run (512 samples each, after the previous
window's last 64) by kvscribe's own front end (kvscribe.voice.file_scan: the model's
per-window convolutions on every core, its LSTM carrying the state from one block to the
next), and the hysteresis below
is `get_speech_timestamps`' loop, copied (faster-whisper 1.2, MIT; from silero-vad).
tests/test_ct2_streaming.py checks both against faster-whisper's on real audio.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Samples
from kvscribe.voice.file_scan import scanner
from kvscribe.voice.silero import WINDOW

CONTEXT = 64  # samples of the previous window each window sees first
# Windows per session run. SileroVADModel runs 10,000 (320 s: about 45 MB of input
# rows alone); with the state carried, fewer give the same probabilities to the bit
# (tested across its 10,000-window boundary), and 1,000 (32 s) keep the VAD's memory that
# of a one-minute file.
BLOCK_WINDOWS = 1_000


def speech_probabilities(samples: Samples) -> np.ndarray:
    """SileroVADModel()(audio padded as get_speech_timestamps pads it), computed a block of
    windows at a time through kvscribe's silero front end (the same model file and the
    same values as one thread, as faster-whisper runs it): one probability per 512
    samples, plus one for the padding."""
    return scanner().probabilities(_padded_pieces(samples))


def _padded_pieces(samples: Samples) -> Iterator[np.ndarray]:
    """`samples` in blocks of BLOCK_WINDOWS windows, padded as get_speech_timestamps pads."""
    padded = samples.size + WINDOW - samples.size % WINDOW  # always pads, 1..512 zeros
    block = BLOCK_WINDOWS * WINDOW
    for start in range(0, padded, block):
        stop = min(start + block, padded)
        piece = np.zeros(stop - start, dtype=np.float32)
        real = samples[start : min(stop, samples.size)]
        piece[: real.size] = real
        if stop == padded:
            # SileroVADModel zeroes its context rows through a view of the audio, which
            # also zeroes the last window's final 64 samples: so must we, to match it.
            piece[-CONTEXT:] = 0
        yield piece


def speech_timestamps(samples: Samples, options) -> list[dict]:
    """faster_whisper.vad.get_speech_timestamps(audio, options) for any Samples: the
    {"start", "end"} samples of each speech chunk, padded."""
    return timestamps_of(speech_probabilities(samples), options, samples.size)


def timestamps_of(speech_probs: np.ndarray, vad_options, audio_length_samples: int) -> list[dict]:
    """get_speech_timestamps' hysteresis over probabilities already computed (its code,
    names kept so the two read side by side; its loop is _Hysteresis.step)."""
    hysteresis = _Hysteresis(vad_options)
    for i, speech_prob in enumerate(speech_probs):
        hysteresis.step(i, speech_prob)
    speeches = hysteresis.finish(audio_length_samples)
    _pad(speeches, hysteresis.speech_pad_samples, audio_length_samples)
    return speeches


class _Hysteresis:
    """get_speech_timestamps' state between windows, and its loop body."""

    def __init__(self, vad_options) -> None:
        sampling_rate = SAMPLE_RATE
        self.threshold = vad_options.threshold
        neg_threshold = vad_options.neg_threshold
        if neg_threshold is None:
            neg_threshold = max(self.threshold - 0.15, 0.01)
        self.neg_threshold = neg_threshold
        self.speech_pad_samples = sampling_rate * vad_options.speech_pad_ms / 1000
        self.min_speech_samples = sampling_rate * vad_options.min_speech_duration_ms / 1000
        self.max_speech_samples = (
            sampling_rate * vad_options.max_speech_duration_s - WINDOW - 2 * self.speech_pad_samples
        )
        self.min_silence_samples = sampling_rate * vad_options.min_silence_duration_ms / 1000
        self.min_silence_samples_at_max_speech = sampling_rate * 98 / 1000
        self.triggered = False
        self.speeches: list[dict] = []
        self.current_speech: dict = {}
        self.temp_end = 0  # a potential end of speech (some silence is tolerated)
        self.prev_end = self.next_start = 0  # potential limits when a chunk reaches its maximum

    def step(self, i: int, speech_prob: float) -> None:
        if (speech_prob >= self.threshold) and self.temp_end:
            self.temp_end = 0
            if self.next_start < self.prev_end:
                self.next_start = WINDOW * i

        if (speech_prob >= self.threshold) and not self.triggered:
            self.triggered = True
            self.current_speech["start"] = WINDOW * i
            return

        too_long = (
            self.triggered and (WINDOW * i) - self.current_speech["start"] > self.max_speech_samples
        )
        if too_long and self._end_at_max_speech(i):
            return

        if (speech_prob < self.neg_threshold) and self.triggered:
            self._quiet(i)

    def _end_at_max_speech(self, i: int) -> bool:
        """A chunk at its maximum length ends; True: the loop moves to the next window."""
        if self.prev_end:
            self.current_speech["end"] = self.prev_end
            self.speeches.append(self.current_speech)
            self.current_speech = {}
            if self.next_start < self.prev_end:  # reached silence and is still not speech
                self.triggered = False
            else:
                self.current_speech["start"] = self.next_start
            self.prev_end = self.next_start = self.temp_end = 0
            return False
        self.current_speech["end"] = WINDOW * i
        self.speeches.append(self.current_speech)
        self.current_speech = {}
        self.prev_end = self.next_start = self.temp_end = 0
        self.triggered = False
        return True

    def _quiet(self, i: int) -> None:
        if not self.temp_end:
            self.temp_end = WINDOW * i
        if (WINDOW * i) - self.temp_end > self.min_silence_samples_at_max_speech:
            self.prev_end = self.temp_end
        if (WINDOW * i) - self.temp_end < self.min_silence_samples:
            return
        self.current_speech["end"] = self.temp_end
        if (self.current_speech["end"] - self.current_speech["start"]) > self.min_speech_samples:
            self.speeches.append(self.current_speech)
        self.current_speech = {}
        self.prev_end = self.next_start = self.temp_end = 0
        self.triggered = False

    def finish(self, audio_length_samples: int) -> list[dict]:
        current = self.current_speech
        if current and (audio_length_samples - current["start"]) > self.min_speech_samples:
            current["end"] = audio_length_samples
            self.speeches.append(current)
        return self.speeches


def _pad(speeches: list[dict], speech_pad_samples: float, audio_length_samples: int) -> None:
    """get_speech_timestamps' padding: a pause shorter than two pads is split between the
    chunks beside it, a longer one gives each its pad."""
    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - speech_pad_samples))
        if i != len(speeches) - 1:
            silence_duration = speeches[i + 1]["start"] - speech["end"]
            if silence_duration < 2 * speech_pad_samples:
                speech["end"] += int(silence_duration // 2)
                speeches[i + 1]["start"] = int(
                    max(0, speeches[i + 1]["start"] - silence_duration // 2)
                )
            else:
                speech["end"] = int(min(audio_length_samples, speech["end"] + speech_pad_samples))
                speeches[i + 1]["start"] = int(
                    max(0, speeches[i + 1]["start"] - speech_pad_samples)
                )
        else:
            speech["end"] = int(min(audio_length_samples, speech["end"] + speech_pad_samples))


def regions_of(speeches: list[dict], size: int) -> list[tuple[int, int]]:
    """The chunks as (start, end) samples that slicing an array of `size` would keep
    (collect_chunks slices audio[start:end]: bounds past the end are cut there)."""
    regions = []
    for speech in speeches:
        start, end = min(speech["start"], size), min(speech["end"], size)
        if end > start:
            regions.append((start, end))
    return regions
