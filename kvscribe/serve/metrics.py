"""The server's figures in Prometheus' text format (version 0.0.4), for GET /metrics."""

from __future__ import annotations

import bisect
import threading
from collections import Counter

from kvscribe.serve.kv_ledger import KvLedger

# Seconds: the latency histogram's upper bounds.
LATENCY_BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 60.0, 120.0, 300.0, 600.0)


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()  # (route, status)
        self._latency = [0] * (len(LATENCY_BUCKETS) + 1)
        self._latency_sum = 0.0
        self._first_delta = [0] * (len(LATENCY_BUCKETS) + 1)
        self._first_delta_sum = 0.0
        self.kv_held_peak_bytes = 0
        self.sessions = 0  # realtime sessions open

    def answered(self, route: str, status: int, seconds: float | None = None) -> None:
        with self._lock:
            self.requests[(route, status)] += 1
            if seconds is not None and status == 200:
                self._latency[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
                self._latency_sum += seconds

    def first_delta(self, seconds: float) -> None:
        with self._lock:
            self._first_delta[bisect.bisect_left(LATENCY_BUCKETS, seconds)] += 1
            self._first_delta_sum += seconds

    def session_opened(self, at_most: int) -> bool:
        """Count a realtime session that opens, unless `at_most` are open already."""
        with self._lock:
            if self.sessions >= at_most:
                return False
            self.sessions += 1
            return True

    def session_closed(self) -> None:
        with self._lock:
            self.sessions -= 1

    def held(self, kv_bytes: int) -> None:
        with self._lock:
            self.kv_held_peak_bytes = max(self.kv_held_peak_bytes, kv_bytes)

    def text(
        self, queue_depth: int, running: int, rows: int, audio_seconds: float, kv: KvLedger
    ) -> str:
        with self._lock:
            lines = [
                "# HELP kvscribe_requests_total Requests answered, by route and status.",
                "# TYPE kvscribe_requests_total counter",
                *(
                    f'kvscribe_requests_total{{route="{route}",status="{status}"}} {count}'
                    for (route, status), count in sorted(self.requests.items())
                ),
                *_gauge("kvscribe_queue_depth", "Requests waiting to start.", queue_depth),
                *_gauge("kvscribe_requests_running", "Long requests decoded in turn.", running),
                *_gauge("kvscribe_rows_in_flight", "Short requests in a shared batch.", rows),
                *_gauge("kvscribe_realtime_sessions", "Realtime sessions open.", self.sessions),
                *_gauge(
                    "kvscribe_kv_held_peak_bytes",
                    "Largest decoder KV cache one decode held (a request's stats' figure: its "
                    "batch's, when requests shared it).",
                    self.kv_held_peak_bytes,
                ),
                *_kv_gauges(kv),
                "# HELP kvscribe_audio_seconds_total Audio decoded, in seconds.",
                "# TYPE kvscribe_audio_seconds_total counter",
                f"kvscribe_audio_seconds_total {audio_seconds:.3f}",
                *_histogram(
                    "kvscribe_request_seconds",
                    "Time from a request's upload to its answer.",
                    self._latency,
                    self._latency_sum,
                ),
                *_histogram(
                    "kvscribe_first_delta_seconds",
                    "Time to a streamed request's first text delta.",
                    self._first_delta,
                    self._first_delta_sum,
                ),
            ]
        return "\n".join(lines) + "\n"


def _gauge(name: str, help_text: str, value: float) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value}"]


def _kv_gauges(kv: KvLedger) -> list[str]:
    """The KV budget's figures; a row's bytes are labelled measured or estimated."""
    lines = _gauge(
        "kvscribe_kv_reserved_bytes", "KV bytes the work in flight reserves.", kv.reserved
    )
    lines += _gauge("kvscribe_kv_reserved_peak_bytes", "Most KV bytes reserved at once.", kv.peak)
    if kv.budget is not None:
        lines += _gauge("kvscribe_kv_budget_bytes", "The KV budget (--kv-budget-mb).", kv.budget)
    if kv.row is not None:
        name = "kvscribe_kv_row_bytes"
        lines += [
            f"# HELP {name} KV bytes one row (a chunk with its beams) reserves.",
            f"# TYPE {name} gauge",
            f'{name}{{provenance="{kv.row.provenance}"}} {kv.row.bytes}',
        ]
    return lines


def _histogram(name: str, help_text: str, counts: list[int], total: float) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    running = 0
    for bound, count in zip((*LATENCY_BUCKETS, "+Inf"), counts, strict=True):
        running += count
        lines.append(f'{name}_bucket{{le="{bound}"}} {running}')
    lines += [f"{name}_sum {total:.3f}", f"{name}_count {running}"]
    return lines
