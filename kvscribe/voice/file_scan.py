"""Silero's speech probabilities of a whole file on every core, the same to the bit as one
session fed the same blocks.

Most of the model's work (its STFT and four convolutions: about 90 % of a window's time,
measured with onnxruntime's profiler) reads each 32 ms window alone; only the LSTM after
them carries state from one window to the next. The model is split in two there: the
convolutions of each block of windows run on a thread of their own, a block per thread at
a time, and the LSTM (and the output layer) runs over the blocks in order. On 2 cores of
an AMD EPYC, 6 minutes of audio took 0.19 s against 0.35 s on one session and one thread,
and 0.26 s on onnxruntime's own two intra-op threads (benchmarks/results/vad_scan.md).
"""

from __future__ import annotations

import functools
import os
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from kvscribe import worker_threads
from kvscribe.staging import staging_file
from kvscribe.voice.silero import (
    SilenceResets,
    SileroVad,
    WindowBatcher,
    bundled_model,
    initial_state,
    session,
    silent_windows,
)

# The convolutions' output (`[windows, 128, 1]`), where the model is cut in two.
_CUT = "/encoder/relu_3/Relu_output_0"


_WRITER_VERSION = 1  # bump when the parts written change: cached parts are keyed by it


@functools.cache
def _halves() -> tuple[Path | bytes, Path | bytes]:
    """The model's two parts: the per-window convolutions (`input` to `_CUT`) and the LSTM
    with the output layer (`_CUT`, `h`, `c` to the model's outputs). Cut once into the
    cache (keyed by the model file's content): cutting needs the `onnx` package, whose
    import alone took 0.09 s of a run's start. A cache that cannot take them: cut in
    memory, each run."""
    from kvscribe.models.store import file_digest
    from kvscribe.paths import cache_dir

    model = bundled_model()
    try:
        key = file_digest(model)[:16]  # memoized in the cache: may fail with it
        folder = cache_dir() / "models"
        paths = tuple(
            folder / f"{model.stem}-{part}-v{_WRITER_VERSION}-{key}.onnx"
            for part in ("convolutions", "lstm")
        )
        if all(path.is_file() for path in paths):
            return paths
        parts = _cut(model)
        for path, part in zip(paths, parts, strict=True):
            _write_whole(path, part)
        return paths
    except OSError:
        return _cut(model)


def _cut(model: Path) -> tuple[bytes, bytes]:
    import onnx
    from onnx.utils import Extractor

    graph = onnx.load(str(model))
    outputs = [output.name for output in graph.graph.output]
    cut = Extractor(graph)
    front = cut.extract_model(["input"], [_CUT])
    back = cut.extract_model([_CUT, "h", "c"], outputs)
    return front.SerializeToString(), back.SerializeToString()


def _write_whole(path: Path, data: bytes) -> None:
    """`data` at `path`, whole or not at all (runs at once may write the same part)."""
    staging = staging_file(path)
    try:
        staging.write_bytes(data)
        os.replace(staging, path)
    finally:
        Path(staging).unlink(missing_ok=True)


@functools.cache
def scanner() -> FileScanner | WholeModelScanner:
    """The process's scanner, a worker per usable core (at most 4). Nothing decodes while a
    file is scanned (a scan ahead shares the cores with the model's load only), so a scan
    may use every core. Made once: its sessions cost a few ms (a folder of long files would
    make them per file)."""
    from kvscribe.machine.capacity import usable_cores

    try:
        return FileScanner(min(4, usable_cores()))
    except ValueError:  # a silero file without this cut point (another faster-whisper's)
        return WholeModelScanner()


class WholeModelScanner:
    """The model whole, one session on one thread: FileScanner's answer where the model
    cannot be cut at `_CUT`."""

    def probabilities(self, pieces: Iterable[np.ndarray]) -> np.ndarray:
        vad = SileroVad(threads=1)
        found = [vad.probabilities(piece) for piece in pieces]
        return np.concatenate(found) if found else np.zeros(0, dtype=np.float32)


class FileScanner:
    """Speech probabilities of blocks of samples, their convolutions on `workers` threads.
    Scans may run at once: each keeps its state and threads, and onnxruntime's sessions
    take concurrent runs."""

    def __init__(self, workers: int):
        front, back = _halves()
        self.workers = max(1, workers)
        self._front = session(front, 1)  # each run on its calling thread (runs may overlap)
        self._back = session(back, 1)

    def probabilities(self, pieces: Iterable[np.ndarray]) -> np.ndarray:
        """One probability per complete 512-sample window of `pieces` joined end to end: what
        kvscribe.voice.silero.SileroVad gives fed the same pieces one after another. At most
        two blocks per worker are held at once, whatever the length."""
        windows, resets = WindowBatcher(), SilenceResets()
        h, c = initial_state()
        found: list[np.ndarray] = []
        pending: deque[Future] = deque()

        def decode_next(h, c):
            convolved, silent = worker_threads.result(pending.popleft())
            return self._decoded(convolved, silent, resets, h, c, found)

        with worker_threads.pool(self.workers, "kvscribe-vad") as pool:
            for piece in pieces:
                batch = windows.batch(piece)
                if batch is not None:
                    pending.append(pool.submit(self._convolved, batch))
                while len(pending) > 2 * self.workers or (pending and pending[0].done()):
                    h, c = decode_next(h, c)
            while pending:
                h, c = decode_next(h, c)
        return np.concatenate(found) if found else np.zeros(0, dtype=np.float32)

    def _convolved(self, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The block's convolutions, and which of its windows are digital silence."""
        return self._front.run([_CUT], {"input": batch})[0], silent_windows(batch)

    def _decoded(self, convolved, silent, resets: SilenceResets, h, c, found: list[np.ndarray]):
        probs, h, c = resets.run(self._lstm, convolved, silent, h, c)
        found.append(probs)
        return h, c

    def _lstm(self, convolved: np.ndarray, h, c):
        return self._back.run(None, {_CUT: convolved, "h": h, "c": c})
