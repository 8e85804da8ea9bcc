"""Decoder calls over single-thread CTranslate2 replicas.

On a CPU, CTranslate2 splits each operation of one call over its intra-op threads; a
decoder step is many small operations, and the threads spend much of it waiting on each
other. Replicas of the model with one thread each (they share one copy of the weights)
avoid that wait:
- Batched rows: each replica takes a share of the rows (dealt so each share holds about
  as much work), keeping every core busy. Decoding 8 rows at beam 5 took 0.47-0.83x the
  time of one replica with every thread, encoding 8 windows 0.62-1.01x, on 2, 4 and 8
  cores of two Intel Xeon machines (benchmarks/results/ct2_replicas*.md).
- One row (faster-whisper's sequential transcribe, live mode's buffers, a batch's lone
  row): its beam search, a decoder step at a time, runs on one replica, while the
  encoder, word alignment and language detection keep every thread (each one pass over
  a window or a text: larger matrices, which threads do speed up). On 2 cores a row's
  beam search took 0.33x its time on both threads (base: 0.47x), and a live-mode decode
  of a 10 s piece 0.59x (base: 0.68x; benchmarks/results/one_row_threads.md). Measured
  on tiny and base; a wider decoder (small and up: larger matrices, which threads may
  well speed up) keeps the whole engine for a row.
The tokens are the same: a row's decode does not depend on the rows beside it or on the
thread count (tests/test_ct2_replicas.py).

On a CPU with several threads the model is loaded once, as the replicas, and the
engine with every thread (for a window's alignment and language detection on the one-row
paths, CTranslate2's own encoder there, a decoder too wide for a replica, and the calls
that draw samples) is a second load of the same weights made only when a call first
needs it (`OnDemand`; tiny.en int8: about 80 MB to load, 100-190 MB more RSS in use).
Where every one-row window needs it (CTranslate2's encoder chosen, or a wide decoder) its
load starts at once, beside the first file's reading (backends/ctranslate2/__init__.py).
Sampled calls (temperature fallback) run a row at a time on a load of their own
(backends/ctranslate2/sampling.py), never on a replica or the engine with every thread. With
one thread (`--threads 1`) or on a GPU there are no replicas: one engine with every thread
does everything else.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from kvscribe import worker_threads
from kvscribe.backends.ctranslate2.sampling import FreshSamples, is_sampled
from kvscribe.errors import BackendUnavailableError

Item = TypeVar("Item")
Result = TypeVar("Result")


# Widest decoder (n_text_state) whose one-row calls were measured faster on a replica:
# base's. tiny's is 384; small's 768 was not measured.
ONE_ROW_WIDTH = 512


@dataclass(frozen=True)
class Replicas:
    """`engine`: a faster_whisper.WhisperModel whose model runs as `workers` single-thread
    replicas; `whole`: the same weights as one replica with every thread (loaded on
    demand where there are replicas), for a one-row path's encoder and alignment and the
    sampled calls, which it passes on to loads of their own (sampling.FreshSamples);
    `one_row`: whether a call of one row goes to a replica."""

    engine: object
    whole: object
    workers: int
    one_row: bool = False
    on_demand: OnDemand | None = None  # `whole`'s model, where it is loaded on demand

    def shares(self, rows: int, weights: Sequence[float] | None = None) -> list[list[int]]:
        """`rows` dealt into at most `workers` shares, each in row order: the heaviest row
        first, each to the lightest share so far (`weights`: each row's expected work,
        equal when None). A replica's share decodes as long as its longest row, so a share
        of long rows beside one of short ones would leave a core idle."""
        parts = max(1, min(self.workers, rows))
        weights = list(weights) if weights is not None else [1.0] * rows
        loads, dealt = [0.0] * parts, [[] for _ in range(parts)]
        for row in sorted(range(rows), key=lambda r: -weights[r]):
            lightest = loads.index(min(loads))
            dealt[lightest].append(row)
            loads[lightest] += weights[row]
        return [sorted(share) for share in dealt if share]

    def map(self, work: Callable[[Item], Result], items: Sequence[Item]) -> list[Result]:
        """`work` over `items` on the replicas at once, results in order (CTranslate2 lets
        go of the GIL in its calls, and a free replica takes each)."""
        if not self.split(len(items)):
            return [work(item) for item in items]
        with worker_threads.pool(min(self.workers, len(items))) as pool:
            futures = [pool.submit(work, item) for item in items]
            return [worker_threads.result(future) for future in futures]

    def split(self, rows: int) -> bool:
        """Whether a call of `rows` rows is shared out over the replicas."""
        return self.workers > 1 and rows > 1

    def decoder(self, rows: int, sampled: bool):
        """The engine for a beam search that is not shared out: a replica for one row,
        else the whole engine."""
        return self.engine if rows == 1 and not sampled and self.rows_on_replica else self.whole

    @functools.cached_property
    def one_row_engine(self):
        """The engine for faster-whisper's own transcribe, which decodes one row at a time:
        its beam search on a replica, the rest on every thread (OneRowModel). Made once:
        live mode asks for it at every decode."""
        if not self.rows_on_replica:
            return self.whole
        from kvscribe.adapters import faster_whisper as adapter

        return adapter.with_model(self.whole, OneRowModel(self.whole.model, self.engine.model))

    def beside(self):
        """A one-row engine for a transcribe running beside another (halves.py): the same
        replicas, its alignment on them too, and its windows encoded on the calling thread
        alone where onnxruntime encodes (the other core runs the other transcribe: two
        windows at once on the every-thread session took 0.156 s each, tiny.en on 2 cores
        of an AMD EPYC, about what one takes on a thread of its own)."""
        from kvscribe.adapters import faster_whisper as adapter
        from kvscribe.backends.ctranslate2.encoder import OnnxEncodedModel

        whole = self.whole.model
        if isinstance(whole, OnnxEncodedModel):
            whole = whole.alone()
        aligned_on_replicas = OneRowModel(whole, self.engine.model, align_on_replicas=True)
        return adapter.with_model(self.whole, aligned_on_replicas)

    @property
    def rows_on_replica(self) -> bool:
        """Whether a one-row beam search runs on a replica (else on `whole`)."""
        return self.one_row and self.workers > 1

    @property
    def whole_started(self) -> bool:
        """Whether `whole` is loaded or loading (always, where it is the engine itself)."""
        return self.on_demand is None or self.on_demand.started

    def start_whole(self) -> None:
        """Start loading `whole` now, where it is loaded on demand."""
        if self.on_demand is not None:
            self.on_demand.start_loading()

    def over_rows(
        self,
        work: Callable[[list[int]], list],
        rows: int,
        weights: Sequence[float] | None = None,
    ) -> list:
        """`work(share)` (one result per row of the share) for every share at once, each
        on a replica; the results in row order."""
        shares = self.shares(rows, weights)
        found: list = [None] * rows
        for share, part in zip(shares, self.map(work, shares), strict=True):
            for row, result in zip(share, part, strict=True):
                found[row] = result
        return found


class OneRowModel:
    """A CTranslate2 Whisper model for calls of one row, run on two loads of its weights:
    beam search (a decoder step at a time) and language detection (one step) on
    `replicas` (a free single-thread replica takes each); sampled search (each row on a
    load of its own, sampling.FreshSamples) and everything else on `whole`: the encoder
    and the alignment are each one pass over a window or a text, which threads do speed
    up (`align_on_replicas`: not where another transcribe runs beside, halves.py)."""

    def __init__(self, whole, replicas, align_on_replicas: bool = False):
        self._whole, self._replicas = whole, replicas
        self._aligner = replicas if align_on_replicas else whole

    def encode(self, *args, **kwargs):
        return self._whole.encode(*args, **kwargs)

    def generate(self, *args, **kwargs):
        model = self._whole if is_sampled(kwargs) else self._replicas
        return model.generate(*args, **kwargs)

    def detect_language(self, *args, **kwargs):
        return self._replicas.detect_language(*args, **kwargs)

    def align(self, *args, **kwargs):
        return self._aligner.align(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._whole, name)


def rows_of(encoded, rows: list[int]):
    """Those rows of an encoder output (a StorageView on any device), as a new StorageView
    in host memory."""
    import ctranslate2

    if encoded.device != "cpu":
        encoded = encoded.to_device(ctranslate2.Device.cpu)
    return ctranslate2.StorageView.from_array(np.ascontiguousarray(np.asarray(encoded)[rows]))


def load(path: str, device: str, compute_type: str, threads: int, width: int) -> Replicas:
    """The backend's engines. On a CPU with more than one thread: the model loaded once, as
    `threads` single-thread replicas, and its every-thread engine (`whole`) loaded only
    when a call first needs it (OnDemand). Elsewhere one engine with every thread.
    `width`: the decoder's, which decides where one row goes."""
    import ctranslate2
    from faster_whisper import WhisperModel

    from kvscribe.adapters import faster_whisper as adapter

    def every_thread():
        return ctranslate2.models.Whisper(
            path, device=device, compute_type=compute_type, intra_threads=threads
        )

    if device != "cpu" or threads < 2:
        engine = WhisperModel(path, device=device, compute_type=compute_type, cpu_threads=threads)
        if device == "cpu":
            adapter.install_model(engine, FreshSamples(engine.model, every_thread))
        return Replicas(engine, engine, 1)
    engine = WhisperModel(
        path, device=device, compute_type=compute_type, cpu_threads=1, num_workers=threads
    )
    whole = OnDemand(every_thread, like=engine.model)
    sampled_apart = FreshSamples(whole, every_thread)
    one_row = width <= ONE_ROW_WIDTH
    return Replicas(engine, adapter.with_model(engine, sampled_apart), threads, one_row, whole)


class OnDemand:
    """A CTranslate2 Whisper model loaded at its first call, or from `start_loading()` on, on
    a thread of its own. What it is (device, compute type, languages) is answered by
    `like`, a loaded model of the same weights, without loading it.

    The replicas' every-thread engine is one: most runs never call it (the batched chunks
    encode on onnxruntime and decode and align on the replicas; a lone row decodes on a
    replica), and a second load held 100 MB more RSS (tiny.en) and took cores from the
    start of every run."""

    DESCRIBED_BY_LIKE = frozenset(
        {"device", "device_index", "compute_type", "is_multilingual", "num_languages", "n_mels"}
    )

    def __init__(self, load: Callable[[], object], like: object):
        self._load, self._like = load, like
        self._lock = threading.Lock()
        self._model: Future | None = None
        self.seconds: float | None = None  # how long the load took, once it has

    def start_loading(self) -> None:
        with self._lock:
            if self._model is None:
                loader = ThreadPoolExecutor(1, thread_name_prefix="kvscribe-whole")
                self._model = loader.submit(self._timed_load)
                loader.shutdown(wait=False)  # the load goes on; the thread ends with it

    @property
    def started(self) -> bool:
        return self._model is not None

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self.DESCRIBED_BY_LIKE:
            return getattr(self._like, name)
        self.start_loading()
        return getattr(worker_threads.result(self._model), name)

    def _timed_load(self):
        started = time.perf_counter()
        try:
            model = self._load()
        except (RuntimeError, OSError, ValueError) as exc:  # out of memory, the files gone
            raise BackendUnavailableError(
                f"the model's second load, with every thread, failed: {exc}",
                subject="ctranslate2",
                hint="free some memory, or run with --threads 1, which loads the model once",
            ) from exc
        self.seconds = time.perf_counter() - started
        return model
