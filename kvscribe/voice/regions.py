"""Speech regions of a whole file: silero's probability of every 32 ms window, fed a block at
a time, turned into padded (start, end) regions by the same hysteresis live mode runs;
`--vad-filter`'s speech joined end to end with the time map back."""

from __future__ import annotations

import weakref

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Joined, Samples, blocks
from kvscribe.decoding import VadFilter
from kvscribe.timing.timemap import TimeMap
from kvscribe.voice.file_scan import scanner
from kvscribe.voice.silero import WINDOW, VadSettings, VoiceDetector

# Files are not spoken to a listener waiting for an utterance to end: no joining rule
# (min_utterance 0), a short release so regions end at real pauses, padding both sides.
FILE_VAD = VadSettings(min_silence=0.3, min_speech=0.25, pad=0.3, min_utterance=0.0)


# Scans made ahead (scan_ahead), each kept until the decode asks for it, or its audio is gone.
_scanned: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def speech_probabilities(audio: Samples) -> np.ndarray:
    """Silero's speech probability of every 32 ms window of `audio`, fed 30 s at a time: the
    same values as feeding it whole (the VAD keeps its state), in memory that does not grow
    with the file (whole, an hour would make a 260 MB batch of windows). A scan made ahead
    of `audio` is taken instead (once)."""
    kept = _scanned.pop(audio, None)
    return kept if kept is not None else _scan(audio)


def scan_ahead(audio: Samples) -> None:
    """Scan `audio` now (kvscribe.voice.ahead: while the model loads) and keep the result for
    its decode's speech_probabilities."""
    _scanned[audio] = _scan(audio)


def _scan(audio: Samples) -> np.ndarray:
    return scanner().probabilities(blocks(audio))


def speech_regions(
    probabilities: np.ndarray, settings: VadSettings, total: int
) -> list[tuple[int, int]]:
    """(start, end) samples of each utterance the live hysteresis finds, padded, in order."""
    detector = VoiceDetector(None, settings)  # type: ignore[arg-type]  # fed probabilities only
    events = detector.feed_probabilities(probabilities)
    closing = detector.close(probabilities.size * WINDOW)
    events += [closing] if closing is not None else []
    regions, start = [], None
    for event in events:
        if event.kind == "start":
            start = event.sample
        elif event.kind in ("end", "discard") and start is not None:
            if event.kind == "end":
                regions.append((start, event.sample + WINDOW))
            start = None
    pad = int(settings.pad * SAMPLE_RATE)
    padded = []
    for begin, end in regions:
        begin, end = max(0, begin - pad), min(total, end + pad)
        if padded and begin < padded[-1][1]:  # padding must not overlap the previous region
            begin = padded[-1][1]
        padded.append((begin, end))
    return padded


def speech_only(audio: Samples, settings: VadFilter) -> tuple[Joined, TimeMap]:
    """The speech in `audio` (mono 16 kHz float32, an array or streamed) joined end to end
    (lazily: nothing is copied until it is read), and its time map."""
    hysteresis = VadSettings(
        threshold=settings.threshold,
        min_silence=settings.min_silence_seconds,
        min_speech=settings.min_speech_seconds,
        pad=settings.pad_seconds,
        min_utterance=0.0,  # a file has no listener waiting: no joining of short utterances
    )
    probabilities = speech_probabilities(audio)
    regions = _merged(speech_regions(probabilities, hysteresis, audio.size))
    return Joined(audio, regions), TimeMap(tuple(regions))


def _merged(regions: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Touching regions (padding met) become one, so no join sits inside continuous speech."""
    merged: list[tuple[int, int]] = []
    for begin, end in regions:
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        elif end > begin:
            merged.append((begin, end))
    return merged
