"""A file's audio as an array of samples that is decoded as it is read.

`StreamedAudio` looks to a backend like the mono 16 kHz float32 array `load_audio`
returns (`size`, `audio[a:b]`), but holds only the slices being read plus a short
history, so memory does not grow with the file's length. Opening it scans the file
once (PyAV, frame by frame): that pass counts the samples, finds truncation,
corruption and NaN/inf before anything is decoded, and keeps a 10 ms peak envelope
(1.4 MB an hour) from which runs of digital silence are found without the audio.
Reads then decode the file a second time, forwards; a read behind the history
restarts that decode (correct, only slower). A file of HOLD_WHOLE_SECONDS or less keeps
the samples its scan decoded (at most 38 MB), so its reads decode nothing: a batched
decode reads the file twice more (the VAD's pass, then the chunks), 0.35 s of decoding
for a 6-minute telephone recording.

`Joined` is the same kind of array made of regions of another one (speech only,
digital silence cut out), and `blocks` walks any of them a block at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from kvscribe import audio as decoding
from kvscribe.audio import SAMPLE_RATE
from kvscribe.errors import AudioDecodeError

PEAK_FRAME = SAMPLE_RATE // 100  # 10 ms: the digital-silence envelope's resolution
# Samples kept behind the latest read: a sequential decoder reads each window once
# (plus the first again after language detection); a batched one goes back up to a
# group of chunks for their unfinished tails and says so with hold_history().
DEFAULT_HISTORY_SECONDS = 60.0
HOLD_WHOLE_SECONDS = 600.0  # a file this short keeps the samples its scan decoded


class Samples(Protocol):
    """Mono 16 kHz float32 audio: a numpy array, a StreamedAudio or a Joined."""

    @property
    def size(self) -> int: ...

    def __getitem__(self, key: slice) -> np.ndarray: ...


# Decoded beyond each read, and forgotten behind it, in steps this large: the buffer is
# joined and trimmed (each a copy of what it holds, up to a batched group's span of a few
# minutes) once per step instead of once per read (a 6-minute telephone file batched:
# 0.33 s of copying before, per 90 reads).
READ_AHEAD = 30 * SAMPLE_RATE


class _ReadInSlices:
    """What a 1-D float32 array offers besides slicing; never converted whole."""

    ndim = 1
    dtype = np.dtype(np.float32)
    size: int

    @property
    def shape(self) -> tuple[int]:
        return (self.size,)

    def __len__(self) -> int:
        return self.size

    def __array__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is read in slices (audio[a:b]), never whole")

    def _bounds(self, key: slice) -> tuple[int, int]:
        if not isinstance(key, slice):
            raise TypeError(f"{type(self).__name__} is read in slices (audio[a:b])")
        start, stop, step = key.indices(self.size)
        if step != 1:
            raise ValueError(f"{type(self).__name__} slices have no step")
        return start, stop


class StreamedAudio(_ReadInSlices):
    """The samples of `path`, decoded on demand; create it with `open_streamed`."""

    def __init__(self, path: Path, size: int, peaks: np.ndarray):
        self.path = path
        self.size = size
        self.peaks = peaks  # max |sample| of each 10 ms frame (the last one may be partial)
        self.history = int(DEFAULT_HISTORY_SECONDS * SAMPLE_RATE)
        self.restarts = 0  # reads that went behind the history (each re-decodes the start)
        self._chunks: Iterator[np.ndarray] | None = None
        self._buffer = np.zeros(0, dtype=np.float32)
        self._low = 0  # sample index of _buffer[0]
        # The replicas read their rows' audio from threads of their own (a batch's rows
        # spread over a long file when its chunks are dealt in lanes): one read at a time
        # moves the decoder and the buffer.
        self._reading = threading.Lock()

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop = self._bounds(key)
        if stop <= start:
            return np.zeros(0, dtype=np.float32)
        with self._reading:
            if start < self._low:
                self._restart()
            self._decode_until(stop)
            out = self._buffer[start - self._low : stop - self._low].copy()
            self._forget_before(start - self.history)
        return out

    def hold_history(self, seconds: float) -> None:
        """Keep at least `seconds` behind each read (a batched decoder's group span)."""
        self.history = max(self.history, int(seconds * SAMPLE_RATE))

    def hold_all(self, samples: np.ndarray) -> None:
        """Read from `samples` (the whole file, decoded already) and never decode again."""
        self._buffer, self._low, self.history = samples, 0, self.size

    @property
    def held(self) -> bool:
        """Whether every sample is held (hold_all): reads then decode nothing, from any thread."""
        return self.history >= self.size and self._low == 0 and self._buffer.size == self.size

    def twin(self) -> StreamedAudio:
        """Another reader of the same file, with a decoder of its own (no second scan): a
        reader of each part of a long file from its own thread."""
        return StreamedAudio(self.path, self.size, self.peaks)

    def close(self) -> None:
        """Close the decoder, once no thread is reading: a run stopped by Ctrl-C or SIGTERM
        closes its file while a replica's thread may still be inside the decoder, and a
        generator closed while it runs raises "generator already executing" (CI, stop 90)."""
        with self._reading:
            self._close_decoder()

    def _close_decoder(self) -> None:
        if self._chunks is not None:
            self._chunks.close()  # type: ignore[attr-defined]  # a generator: closes PyAV
            self._chunks = None
        self._buffer, self._low = np.zeros(0, dtype=np.float32), 0

    def _restart(self) -> None:
        self._close_decoder()
        self.restarts += 1

    def _decode_until(self, stop: int) -> None:
        have = self._low + self._buffer.size
        if stop <= have:
            return
        if self._chunks is None:
            _, self._chunks = decoding.open_stream(self.path)
        fresh: list[np.ndarray] = []
        ahead = min(stop + READ_AHEAD, self.size)  # fewer, larger joins of the buffer
        for chunk in self._chunks:
            fresh.append(chunk)
            have += chunk.size
            if have >= ahead:
                break
        if have < stop:
            raise AudioDecodeError(
                "changed while it was being transcribed",
                subject=str(self.path),
                hint="transcribe a copy that nothing else writes to",
            )
        self._buffer = np.concatenate([self._buffer, *fresh])

    def _forget_before(self, sample: int) -> None:
        # in steps of READ_AHEAD: each step copies what is kept
        if sample - self._low >= READ_AHEAD:
            drop = min(sample - self._low, self._buffer.size)
            self._buffer = self._buffer[drop:].copy()
            self._low += drop


def open_streamed(path: Path, hold_seconds: float = HOLD_WHOLE_SECONDS) -> StreamedAudio:
    """Scan `path` once and return its samples as a StreamedAudio (holding them all when
    the file lasts `hold_seconds` or less). Raises as load_audio does (missing, unreadable,
    not audio, empty, truncated, corrupt, NaN/inf), before any sample reaches a decoder."""
    decoding.check_readable(path)
    info, chunks = decoding.open_stream(path)
    envelope, size = PeakEnvelope(), 0
    kept: list[np.ndarray] | None = []
    for chunk in chunks:
        bad = np.flatnonzero(~np.isfinite(chunk))
        if bad.size:
            at = (size + int(bad[0])) / SAMPLE_RATE
            raise decoding.non_finite_error(path, f"non-finite samples (NaN/inf) from {at:.2f} s")
        envelope.add(chunk)
        size += chunk.size
        if kept is not None:
            kept.append(chunk)
            if size > hold_seconds * SAMPLE_RATE:
                kept = None  # too long to hold: read in slices
    if size == 0:
        raise AudioDecodeError(
            "contains no audio samples",
            subject=str(path),
            hint="the recording is empty; re-export it",
        )
    decoding.check_complete(path, info, size / SAMPLE_RATE)
    streamed = StreamedAudio(path, size, envelope.finish())
    if kept:
        streamed.hold_all(np.concatenate(kept))
    return streamed


class Joined(_ReadInSlices):
    """`regions` ((start, end) samples of `source`, in order, not overlapping) end to end."""

    def __init__(self, source: Samples, regions: Sequence[tuple[int, int]]):
        self.source = source
        self.regions = tuple(regions)
        self._starts = np.cumsum([0] + [end - begin for begin, end in self.regions])
        self.size = int(self._starts[-1])

    def hold_history(self, seconds: float) -> None:
        hold_history(self.source, seconds)

    def source_positions(self, positions: np.ndarray) -> np.ndarray:
        """Where the joined samples at `positions` are in `source`."""
        index = np.searchsorted(self._starts, positions, side="right") - 1
        index = np.clip(index, 0, len(self.regions) - 1)
        begins = np.array([begin for begin, _ in self.regions], dtype=np.int64)
        return begins[index] + (positions - self._starts[index])

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop = self._bounds(key)
        parts = []
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        for index in range(max(first, 0), len(self.regions)):
            at = int(self._starts[index])
            if at >= stop:
                break
            begin, end = self.regions[index]
            lo, hi = max(start - at, 0), min(stop - at, end - begin)
            if hi > lo:
                parts.append(self.source[begin + lo : begin + hi])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


def hold_history(samples: Samples, seconds: float) -> None:
    """Ask a streamed source to keep `seconds` behind each read; arrays hold everything."""
    holder = getattr(samples, "hold_history", None)
    if holder is not None:
        holder(seconds)


def blocks(samples: Samples, block: int = 30 * SAMPLE_RATE) -> Iterator[np.ndarray]:
    """`samples` a block at a time, in order (the last block may be shorter)."""
    for start in range(0, samples.size, block):
        yield samples[start : start + block]


def frame_peaks(samples: Samples) -> np.ndarray:
    """max |sample| of each 10 ms frame: the scan's for a StreamedAudio, else computed a
    block at a time."""
    peaks = getattr(samples, "peaks", None)
    if peaks is not None:
        return peaks
    envelope = PeakEnvelope()
    for block in blocks(samples, 100 * PEAK_FRAME * 30):
        envelope.add(block)
    return envelope.finish()


class PeakEnvelope:
    """Builds frame_peaks from consecutive pieces of any size."""

    def __init__(self) -> None:
        self._parts: list[np.ndarray] = []
        self._carry = np.zeros(0, dtype=np.float32)

    def add(self, piece: np.ndarray) -> None:
        joined = np.concatenate([self._carry, np.abs(piece)])
        whole = joined.size // PEAK_FRAME * PEAK_FRAME
        if whole:
            self._parts.append(joined[:whole].reshape(-1, PEAK_FRAME).max(axis=1))
        self._carry = joined[whole:]

    def finish(self) -> np.ndarray:
        if self._carry.size:
            self._parts.append(np.array([self._carry.max()], dtype=np.float32))
        return np.concatenate(self._parts) if self._parts else np.zeros(0, dtype=np.float32)
