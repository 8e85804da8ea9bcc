"""faster-whisper's VAD filter (`get_speech_timestamps`, silero v6) fed a block at a time.

faster-whisper's own function takes the whole file as one array (an hour: 230 MB of
samples, padded again). This module gives the same speech timestamps, to the sample, from
any Samples read in blocks: the probabilities come from the silero model faster-whisper ships,
fed the windows its `SileroVADModel` would run (512 samples each, after the previous
window's last 64) by kvscribe's own front end (kvscribe.live.vad.SileroVad, which carries
the model's state from one block to the next), and the hysteresis below
is `get_speech_timestamps`' loop, copied (faster-whisper 1.2, MIT; from silero-vad).
tests/test_ct2_streaming.py checks both against faster-whisper's on real audio.
"""

from __future__ import annotations

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio_stream import Samples
from kvscribe.live.vad import WINDOW, SileroVad

CONTEXT = 64  # samples of the previous window each window sees first
# Windows per session run. SileroVADModel runs 10,000 (320 s: about 45 MB of input
# rows alone); with the state carried, fewer give the same probabilities to the bit
# (tested across its 10,000-window boundary), and 1,000 (32 s) keep the VAD's memory that
# of a one-minute file.
BLOCK_WINDOWS = 1_000


def speech_probabilities(samples: Samples) -> np.ndarray:
    """SileroVADModel()(audio padded as get_speech_timestamps pads it), computed a block of
    windows at a time through kvscribe's silero front end (the same model file, one
    thread as faster-whisper runs it): one probability per 512 samples, plus one for the
    padding."""
    vad = SileroVad(threads=1)
    padded = samples.size + WINDOW - samples.size % WINDOW  # always pads, 1..512 zeros
    block = BLOCK_WINDOWS * WINDOW
    found = []
    for start in range(0, padded, block):
        stop = min(start + block, padded)
        piece = np.zeros(stop - start, dtype=np.float32)
        real = samples[start : min(stop, samples.size)]
        piece[: real.size] = real
        if stop == padded:
            # SileroVADModel zeroes its context rows through a view of the audio, which
            # also zeroes the last window's final 64 samples: so must we, to match it.
            piece[-CONTEXT:] = 0
        found.append(vad.probabilities(piece))
    return np.concatenate(found)


def speech_timestamps(samples: Samples, options) -> list[dict]:
    """faster_whisper.vad.get_speech_timestamps(audio, options) for any Samples: the
    {"start", "end"} samples of each speech chunk, padded."""
    return timestamps_of(speech_probabilities(samples), options, samples.size)


def timestamps_of(speech_probs: np.ndarray, vad_options, audio_length_samples: int) -> list[dict]:
    """get_speech_timestamps' hysteresis over probabilities already computed (its code,
    names kept so the two read side by side)."""
    sampling_rate = SAMPLE_RATE
    threshold = vad_options.threshold
    neg_threshold = vad_options.neg_threshold
    min_speech_duration_ms = vad_options.min_speech_duration_ms
    max_speech_duration_s = vad_options.max_speech_duration_s
    min_silence_duration_ms = vad_options.min_silence_duration_ms
    window_size_samples = WINDOW
    speech_pad_ms = vad_options.speech_pad_ms
    min_speech_samples = sampling_rate * min_speech_duration_ms / 1000
    speech_pad_samples = sampling_rate * speech_pad_ms / 1000
    max_speech_samples = (
        sampling_rate * max_speech_duration_s - window_size_samples - 2 * speech_pad_samples
    )
    min_silence_samples = sampling_rate * min_silence_duration_ms / 1000
    min_silence_samples_at_max_speech = sampling_rate * 98 / 1000

    triggered = False
    speeches = []
    current_speech = {}
    if neg_threshold is None:
        neg_threshold = max(threshold - 0.15, 0.01)
    temp_end = 0  # a potential end of speech (some silence is tolerated)
    prev_end = next_start = 0  # potential limits when a chunk reaches its maximum size

    for i, speech_prob in enumerate(speech_probs):
        if (speech_prob >= threshold) and temp_end:
            temp_end = 0
            if next_start < prev_end:
                next_start = window_size_samples * i

        if (speech_prob >= threshold) and not triggered:
            triggered = True
            current_speech["start"] = window_size_samples * i
            continue

        if triggered and (window_size_samples * i) - current_speech["start"] > max_speech_samples:
            if prev_end:
                current_speech["end"] = prev_end
                speeches.append(current_speech)
                current_speech = {}
                if next_start < prev_end:  # reached silence and is still not speech
                    triggered = False
                else:
                    current_speech["start"] = next_start
                prev_end = next_start = temp_end = 0
            else:
                current_speech["end"] = window_size_samples * i
                speeches.append(current_speech)
                current_speech = {}
                prev_end = next_start = temp_end = 0
                triggered = False
                continue

        if (speech_prob < neg_threshold) and triggered:
            if not temp_end:
                temp_end = window_size_samples * i
            if (window_size_samples * i) - temp_end > min_silence_samples_at_max_speech:
                prev_end = temp_end
            if (window_size_samples * i) - temp_end < min_silence_samples:
                continue
            current_speech["end"] = temp_end
            if (current_speech["end"] - current_speech["start"]) > min_speech_samples:
                speeches.append(current_speech)
            current_speech = {}
            prev_end = next_start = temp_end = 0
            triggered = False
            continue

    if current_speech and (audio_length_samples - current_speech["start"]) > min_speech_samples:
        current_speech["end"] = audio_length_samples
        speeches.append(current_speech)

    _pad(speeches, speech_pad_samples, audio_length_samples)
    return speeches


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
