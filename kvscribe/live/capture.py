"""Where live audio comes from: a file replayed at real-time pace (or as fast as the decoder
takes it), raw 16 kHz s16le PCM on stdin, or a microphone. Each source runs in its own thread
and hands mono 16 kHz float32 chunks to the session through a bounded queue."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import numpy as np

from kvscribe import audio
from kvscribe.audio.stdin import container_in
from kvscribe.errors import AudioDecodeError, InputNotFoundError, KvscribeError

_log = logging.getLogger(__name__)

CHUNK_SECONDS = 0.1
_CHUNK = int(CHUNK_SECONDS * audio.SAMPLE_RATE)


@dataclass(frozen=True)
class Chunk:
    samples: np.ndarray  # mono 16 kHz float32
    arrived: float  # perf_counter() when it reached kvscribe


Emit = Callable[[np.ndarray], None]


class Source(Protocol):
    label: str
    live: bool  # audio arrives whether or not it is taken: a full queue drops it
    # Times the device lost input before handing it over (a microphone read too late: an
    # overflow, its length unknown). Only a device can; other sources keep 0.
    overflows: int

    def run(self, emit: Emit, stopped: threading.Event) -> None:
        """Emit chunks until the audio ends or `stopped` is set; raise KvscribeError."""


class FileReplay:
    """An audio file in 0.1 s chunks, each released when its time comes (`paced`), or all
    as fast as the session takes them."""

    overflows = 0

    def __init__(self, path: Path, paced: bool):
        audio.check_readable(path)
        audio.open_stream(path)[1].close()  # not audio: said before -o is made
        self.path, self.live = path, paced
        self.label = f"{path} ({'real-time replay' if paced else 'as fast as possible'})"

    def run(self, emit: Emit, stopped: threading.Event) -> None:
        started, sent = time.perf_counter(), 0
        for chunk in _rechunk(audio.stream_audio(self.path)):
            if stopped.is_set():
                return
            if self.live:
                due = started + (sent + chunk.size) / audio.SAMPLE_RATE
                stopped.wait(max(0.0, due - time.perf_counter()))
            emit(chunk)
            sent += chunk.size
        if sent == 0:
            raise AudioDecodeError("contains no audio samples", subject=str(self.path))


class PcmStdin:
    """Raw signed 16-bit little-endian mono PCM at 16 kHz, e.g. from `arecord -f S16_LE
    -r 16000 -c 1` or `ffmpeg ... -f s16le -ar 16000 -ac 1 -`. A writer faster than real time
    simply waits (the pipe fills); nothing is dropped."""

    live = False
    overflows = 0

    def __init__(self, stream: BinaryIO, name: str = "stdin"):  # or a named pipe's path
        self.stream = stream
        self.name = name
        self.label = f"{name} (s16le 16 kHz mono)"

    def run(self, emit: Emit, stopped: threading.Event) -> None:
        carry, first = b"", True
        while not stopped.is_set():
            data = self.stream.read(2 * _CHUNK)
            if not data:
                if first:
                    raise AudioDecodeError(
                        "nothing arrived",
                        subject=self.name,
                        hint=f"pipe raw PCM in, e.g. {_PCM_EXAMPLE}",
                    )
                return
            if first:
                _refuse_a_container(data, self.name)
                first = False
            data, carry = carry + data, b""
            if len(data) % 2:  # a sample split across reads
                data, carry = data[:-1], data[-1:]
            emit(np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0)


_PCM_EXAMPLE = "arecord -f S16_LE -r 16000 -c 1 | kvscribe mic --live --input -"


def _refuse_a_container(head: bytes, name: str) -> None:
    """A container on stdin where raw PCM was asked for: say so, with the fix."""
    kind = container_in(head)
    if kind is not None:
        raise AudioDecodeError(
            f"holds {kind}, not raw 16 kHz mono 16-bit PCM",
            subject=name,
            hint="give the file with --input FILE, or convert it: ffmpeg -i FILE -f s16le "
            "-ar 16000 -ac 1 - | kvscribe mic --live --input -",
        )


def _rechunk(pieces) -> np.ndarray:
    """Decoder frames of any size -> 0.1 s chunks (the last may be shorter)."""
    held = np.zeros(0, dtype=np.float32)
    for piece in pieces:
        held = np.concatenate([held, piece])
        while held.size >= _CHUNK:
            yield held[:_CHUNK]
            held = held[_CHUNK:]
    if held.size:
        yield held


_END = object()


class Capture:
    """Runs a source in a daemon thread. A live source that outruns the session by more than
    `backlog` seconds loses its oldest waiting audio, counted in `dropped_seconds`; other
    sources wait. A source that fails part-way ends the audio as its end would, so what it
    gave is finished first; then raise_failure() raises its error."""

    def __init__(self, source: Source, backlog: float = 30.0):
        self.source = source
        self.failure: KvscribeError | None = None
        self.dropped_seconds = 0.0
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(backlog / CHUNK_SECONDS)))
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvscribe-capture", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def close(self, within: float = 2.0) -> None:
        """Stop, and wait up to `within` seconds for the source to let go of its device: a
        microphone's stream must be closed before the process exits, or PortAudio's
        callback thread runs on into the interpreter's teardown (a double free)."""
        self.stop()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(within)

    def get(self, timeout: float) -> Chunk | None:
        """The next chunk; None if none came within `timeout`. Raises EOFError at the end,
        also the end a failed source came to (its error: `failure`)."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _END:
            self._queue.put(_END)  # stay at the end for later calls
            raise EOFError
        if isinstance(item, KvscribeError):
            self.failure = item
            self._queue.put(_END)
            raise EOFError
        return item

    def raise_failure(self) -> None:
        """The source's error, if it failed part-way (a truncated file, a device gone)."""
        if self.failure is not None:
            raise self.failure

    @property
    def device_overflows(self) -> int:
        return self.source.overflows

    def waiting(self) -> bool:
        return not self._queue.empty()

    def _emit(self, samples: np.ndarray) -> None:
        chunk = Chunk(samples, time.perf_counter())
        if not self.source.live:
            while not self._stopped.is_set():
                try:
                    self._queue.put(chunk, timeout=0.1)
                    return
                except queue.Full:
                    continue
            return
        while True:  # behind by more than the backlog: lose the oldest audio, keep up with now
            try:
                self._queue.put_nowait(chunk)
                return
            except queue.Full:
                pass
            try:
                lost = self._queue.get_nowait()
            except queue.Empty:
                continue
            if isinstance(lost, Chunk):
                self.dropped_seconds += lost.samples.size / audio.SAMPLE_RATE

    def _run(self) -> None:
        outcome: object = _END
        try:
            self.source.run(self._emit, self._stopped)
        except KvscribeError as exc:
            outcome = exc
        except OSError as exc:
            outcome = InputNotFoundError(
                f"reading audio failed: {exc.strerror or exc}", subject=self.source.label
            )
        except Exception as exc:  # a thread's death must not leave the session waiting forever
            _log.debug("the capture of %s failed", self.source.label, exc_info=True)
            outcome = InputNotFoundError(
                f"reading audio failed: {type(exc).__name__}: {exc}", subject=self.source.label
            )
        while True:  # the end marker must get in, even past a full queue
            try:
                self._queue.put(outcome, timeout=0.1)
                return
            except queue.Full:
                if self._stopped.is_set():
                    return
