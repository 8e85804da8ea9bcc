"""Runs of digital silence (samples at 16-bit zero) in a file, found from its 10 ms peak
envelope and cut out before decoding, with the time map back: Whisper reads a window of
nothing as "You"."""

from __future__ import annotations

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import PEAK_FRAME, Joined, Samples, frame_peaks
from kvscribe.timing.timemap import TimeMap

# Samples within 2 steps of 16-bit zero hold nothing to hear (about -84 dBFS).
DIGITAL_SILENCE_PEAK = 2 / 32768
# Runs at least this long are not decoded: Whisper reads a window of nothing as "You"
# (tiny.en, 20 s of zeros: no-speech probability 0.94, but mean log-probability -0.78
# passes openai-whisper's -1.0 test, so its silence rule keeps the text).
MIN_DIGITAL_SILENCE = 1.0
# Of each run cut out, this much stays at either end (the file's start excepted): a
# pause still reads as one where two utterances meet, so the decoder does not run them
# together, and a window holds speech, not silence.
KEPT_SILENCE = 0.1
_FRAME = PEAK_FRAME  # 10 ms


def without_digital_silence(audio: Samples) -> tuple[Joined, TimeMap] | None:
    """`audio` without its runs of digital silence of MIN_DIGITAL_SILENCE or more (joined
    lazily), and the time map back; None when there are none (the audio decodes as it is).
    Found from the 10 ms peak envelope, which a streamed file has from its scan."""
    silent = frame_peaks(audio) <= DIGITAL_SILENCE_PEAK
    edges = np.flatnonzero(np.diff(np.concatenate(([0], silent.astype(np.int8), [0]))))
    runs = [
        _cut_of(int(a) * _FRAME, min(int(b) * _FRAME, audio.size), audio.size)
        for a, b in zip(edges[::2], edges[1::2], strict=True)
        if b - a >= MIN_DIGITAL_SILENCE * 100
    ]
    if not runs:
        return None
    regions, at = [], 0
    for begin, end in runs:
        if begin > at:
            regions.append((at, begin))
        at = end
    if at < audio.size:
        regions.append((at, audio.size))
    return Joined(audio, regions), TimeMap(tuple(regions))


def _cut_of(begin: int, end: int, total: int) -> tuple[int, int]:
    """The part of a silent run [begin, end) to cut: a run at either end of the file goes
    whole, one between sounds keeps KEPT_SILENCE at either side."""
    if begin == 0 or end >= total:
        return begin, end
    keep = round(KEPT_SILENCE * SAMPLE_RATE)
    return begin + keep, end - keep
