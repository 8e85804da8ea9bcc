"""A long input runs as bounded pieces, one whisper-cli process each, cut at quiet points.

whisper-cli reads its whole input WAV into memory and computes the whole input's log-mel
before it decodes anything, so its peak RSS grows with the input: reading and log-mel
alone, tiny.en at cpu-laptop's flags holds 191 MB for 1 min, 220 MB for 4, 277 MB for 10
and 757 MB for 60, about 9.5 MB a minute (benchmarks/results/whispercpp_pieces.md). An
input longer than PIECE_SECONDS (4 min) is cut into about equal pieces of at most that
length, each run on its own and its times moved back onto the input's clock; shorter
inputs run whole, in one whisper-cli call, as before. A full decode also holds the
decoder's compute buffer as far as decoding has filled it (previous-text context, beams,
fallback samples): the full decode's peak less the read + log-mel one is 78, 93, 93 and
93 MB at 1, 2, 4 and 10 min, full by two minutes of speech and then flat, so a piece's
peak is the same however long the file (and a 1-minute file's is lower). Each further
run costs a model load and a partly filled last window.

A piece ends at the quietest QUIET_SECONDS (summed 10 ms peaks) in the SEARCH_SECONDS
around its target end (an equal share of what is left), on a 10 ms frame, so its offset
is a whole number of whisper.cpp's centiseconds. The audio is read once, front to back:
the search region beyond a cut is kept and opens the next piece, so a StreamedAudio never
restarts its decode (even under a Joined whose regions lie far apart in the file).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvscribe.audio.stream import PEAK_FRAME, PeakEnvelope, Samples
from kvscribe.backends.whispercpp.process import SAMPLE_RATE, WAV_BLOCK, WavWriter
from kvscribe.errors import UsageError

PIECE_SECONDS = 240.0
PIECE_ENV = "KVSCRIBE_WHISPER_PIECE_SECONDS"  # another length; 0: always one run
MIN_PIECE_SECONDS = 60.0  # a target is then >= 30 s in: its search region fits the piece
SEARCH_SECONDS = 30.0
QUIET_SECONDS = 0.4
SAMPLES_PER_CS = SAMPLE_RATE // 100  # whisper.cpp times are centiseconds: one 10 ms frame


@dataclass(frozen=True)
class Piece:
    """Samples [start, end) of the input; `last`: nothing follows it."""

    index: int
    start: int
    end: int
    last: bool

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / SAMPLE_RATE

    @property
    def offset_cs(self) -> int:
        """Where the piece starts on the input's clock (exact: cuts fall on 10 ms frames)."""
        return self.start // SAMPLES_PER_CS


def piece_limit() -> int:
    """The longest piece in samples (PIECE_ENV overrides; 0: no limit)."""
    value = os.environ.get(PIECE_ENV)
    if value is None:
        return int(PIECE_SECONDS * SAMPLE_RATE)
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds != 0 and not seconds >= MIN_PIECE_SECONDS:
        raise UsageError(
            f"{PIECE_ENV}={value!r} is not a piece length",
            hint=f"give seconds, at least {MIN_PIECE_SECONDS:g}, or 0 to run inputs whole",
        )
    return int(seconds * SAMPLE_RATE)


def write_pieces(audio: Samples, wav: Path, limit: int) -> Iterator[Piece]:
    """Write each piece of `audio` to `wav` in turn (replacing the one before) and yield it
    once written. `limit` 0, or audio no longer than it: one piece, the whole input."""
    reader, start, index = _Forward(audio), 0, 0
    while True:
        remaining = audio.size - start
        count = -(-remaining // limit) if limit else 1
        if count <= 1:
            with WavWriter(wav) as out:
                _copy(reader, start, audio.size, out)
            yield Piece(index, start, audio.size, last=True)
            return
        target = start + remaining // count  # equal shares of what is left
        half = int(SEARCH_SECONDS * SAMPLE_RATE) // 2
        search = _on_frame(target - half)
        with WavWriter(wav) as out:
            _copy(reader, start, search, out)
            region = reader.read(search, min(target + half, start + limit))
            end = search + quiet_point(region)
            out.write(region[: end - search])
        reader.forget(end)  # the rest of the region opens the next piece
        yield Piece(index, start, end, last=False)
        start, index = end, index + 1


class _Forward:
    """Reads `audio` once, front to back, keeping what was read until forgotten: a piece's
    search region beyond its cut is the next piece's start, and is not read again (a
    Joined's regions may lie far apart in its source, beyond any decode history)."""

    def __init__(self, audio: Samples):
        self.audio = audio
        self.low = 0  # sample index of kept[0]
        self.kept = np.zeros(0, dtype=np.float32)

    def read(self, first: int, end: int) -> np.ndarray:
        high = self.low + self.kept.size
        if first < self.low:
            raise ValueError(f"sample {first} was read and forgotten")
        if first >= high:
            self.kept, self.low = self.audio[first:end], first
        elif end > high:
            self.kept = np.concatenate([self.kept[first - self.low :], self.audio[high:end]])
            self.low = first
        return self.kept[first - self.low : end - self.low]

    def forget(self, before: int) -> None:
        drop = min(max(0, before - self.low), self.kept.size)
        self.kept, self.low = self.kept[drop:], self.low + drop


def quiet_point(region: np.ndarray) -> int:
    """Where to cut `region`: the middle of its quietest QUIET_SECONDS (the smallest sum of
    10 ms peaks; the latest of equals), on a frame boundary, never at its very start."""
    envelope = PeakEnvelope()
    envelope.add(region)
    peaks = envelope.finish()[: region.size // PEAK_FRAME]  # whole frames only
    width = int(QUIET_SECONDS * SAMPLE_RATE) // PEAK_FRAME
    if peaks.size <= width:
        return max(PEAK_FRAME, peaks.size // 2 * PEAK_FRAME)
    sums = np.convolve(peaks.astype(np.float64), np.ones(width), mode="valid")
    latest = sums.size - 1 - int(np.argmin(sums[::-1]))
    return (latest + width // 2) * PEAK_FRAME


def _copy(reader: _Forward, start: int, end: int, out: WavWriter) -> None:
    for at in range(start, end, WAV_BLOCK):
        stop = min(at + WAV_BLOCK, end)
        out.write(reader.read(at, stop))
        reader.forget(stop)


def _on_frame(sample: int) -> int:
    return sample // SAMPLES_PER_CS * SAMPLES_PER_CS
