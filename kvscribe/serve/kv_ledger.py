"""The server's KV budget: the decoder cache bytes admitted work may hold, all lanes
together.

Each request admitted reserves what its rows hold at their largest: a row is one speech
chunk with its beams, whose bytes the backend gives (Backend.kv_row_bytes: measured from a
probe's caches on the stepped engines, estimated from the model's dimensions on
ctranslate2). A short request is one row (the chunker joins an input's speech up to 30 s);
a long one reserves the rows its batches decode at once. Work waits while its rows do not
fit beside what is reserved, unless nothing is: one request always runs, as a file run
with a budget below one row still decodes a chunk at a time. So the budget sets the
concurrency, and a leaner cache policy admits more rows in the same bytes."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class RowCost:
    """What one row reserves, and how the figure is known (kvscribe.provenance)."""

    bytes: int
    provenance: str


class KvLedger:
    def __init__(self, budget_bytes: int | None, row: RowCost | None):
        self.budget = budget_bytes  # None: no budget (admitted by the queue's bounds)
        self.row = row  # None: the engine's cache is not kvscribe's to count
        self.reserved = 0
        self.peak = 0
        self._lock = threading.Lock()

    @property
    def bounded(self) -> bool:
        return self.budget is not None and self.row is not None

    def admits(self, rows: int) -> bool:
        """Whether `rows` rows fit beside what is reserved (or nothing is reserved)."""
        if not self.bounded:
            return True
        with self._lock:
            return self.reserved == 0 or self.reserved + rows * self.row.bytes <= self.budget

    def rows_free(self, wanted: int) -> int:
        """How many of `wanted` rows fit now (all of them without a budget; at least one
        when nothing is reserved)."""
        if not self.bounded or wanted <= 0:
            return wanted
        with self._lock:
            free = (self.budget - self.reserved) // max(1, self.row.bytes)
            return min(wanted, max(free, 1 if self.reserved == 0 else 0))

    def reserve(self, rows: int) -> int:
        """Reserve `rows` rows' bytes; returns the bytes, to be released when they go."""
        cost = rows * self.row.bytes if self.row is not None else 0
        with self._lock:
            self.reserved += cost
            self.peak = max(self.peak, self.reserved)
        return cost

    def release(self, cost: int) -> None:
        with self._lock:
            self.reserved -= cost


def describe_budget(ledger: KvLedger) -> str:
    """The budget in a phrase, for the server's first lines."""
    if ledger.row is None:
        return "KV budget: none (this engine's cache is not counted)"
    row = f"{ledger.row.bytes / 1e6:.2f} MB per row ({ledger.row.provenance})"
    if ledger.budget is None:
        return f"KV budget: none; {row}"
    rows = max(1, ledger.budget // max(1, ledger.row.bytes))
    return f"KV budget {ledger.budget / 1e6:g} MB: {rows} row(s) of {row}"
