"""Batched rows over single-thread CTranslate2 replicas.

On a CPU, CTranslate2 splits each operation of one call over its intra-op threads; a
decoder step over a batch is many small operations, and the threads spend much of it
waiting on each other. Replicas of the model with one thread each (they share one copy
of the weights), each taking a share of the rows, keep every core busy instead (the rows
dealt so each share holds about as much work). Decoding 8 rows at beam 5 took 0.47-0.83x
the time of one replica with every thread, encoding 8 windows 0.62-1.01x, on 2, 4 and 8
cores of two Intel Xeon machines (benchmarks/results/ct2_replicas*.md). The tokens are
the same: a row's decode does not depend on the rows beside it
(tests/test_ct2_replicas.py).

The replicas are a second load of the model beside the backend's one-replica engine
(tiny.en int8: about 70 MB more), made on the first batched decode, on a thread of its
own while the file is scanned for speech (backends/ctranslate2.py). That engine keeps
the calls of one row (one single-thread replica would leave the other cores idle) and
the calls that draw samples (temperature fallback): CTranslate2 seeds a sampling
generator per worker thread, and which replica takes a call is a race, so sampled text
would change from run to run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

Item = TypeVar("Item")
Result = TypeVar("Result")


@dataclass(frozen=True)
class Replicas:
    """`engine`: a faster_whisper.WhisperModel whose model runs as `workers` single-thread
    replicas; `whole`: the same weights as one replica with every thread, for calls of
    one row (one replica alone would leave the other cores idle) and sampled calls."""

    engine: object
    whole: object
    workers: int

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
        with ThreadPoolExecutor(min(self.workers, len(items))) as pool:
            return list(pool.map(work, items))

    def split(self, rows: int) -> bool:
        """Whether a call of `rows` rows is shared out (one row: the whole engine's threads
        serve it better than one replica)."""
        return self.workers > 1 and rows > 1

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


def rows_of(encoded, rows: list[int]):
    """Those rows of an encoder output (a StorageView on any device), as a new StorageView
    in host memory."""
    import ctranslate2

    if encoded.device != "cpu":
        encoded = encoded.to_device(ctranslate2.Device.cpu)
    return ctranslate2.StorageView.from_array(np.ascontiguousarray(np.asarray(encoded)[rows]))


def replicas(engine, path: str, device: str, compute_type: str, threads: int) -> Replicas:
    """`engine` (a WhisperModel of one replica with `threads` threads) and, on a CPU with
    more than one thread, the same model as `threads` single-thread replicas."""
    if device != "cpu" or threads < 2:
        return Replicas(engine, engine, 1)
    import ctranslate2

    from kvscribe.adapters import faster_whisper as adapter

    model = ctranslate2.models.Whisper(
        path, device=device, compute_type=compute_type, inter_threads=threads, intra_threads=1
    )
    return Replicas(adapter.with_model(engine, model), engine, threads)
