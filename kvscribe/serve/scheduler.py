"""The engine lanes: each lane is a thread that owns one loaded backend, and every request's
audio is decoded on one of them.

On a CPU the server runs a lane per core, each engine single-threaded, as a batch folder
runs a worker per core (kvscribe.machine.capacity.default_jobs: measured faster than one
engine with every thread). Requests of 30 s or less go to whichever lane is free first;
those whose decoding may be shared (Backend.shares_batches) are decoded side by side in the
batches a long file's speech chunks use (Backend.transcribe_together), with the other short
requests waiting with the same decoding choices, and a short request is always decoded this
way, alone or not, so its tokens do not depend on the load. Longer requests never go to the
last lane: it stays free for short ones, so a short request does not wait for a long one's
turn. A lane decodes its long requests a segment at a time, in turn, and takes the short
requests waiting before each turn. Every request admitted reserves its rows' KV bytes in
the server's budget (kvscribe.serve.kv_ledger) until it is done; work that does not fit
waits.

Everything a request learns comes as events, on its lane's thread, through its `sink`.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from kvscribe import setting_rows as row
from kvscribe.audio import SAMPLE_RATE
from kvscribe.chunking import MAX_SECONDS
from kvscribe.contract import DecodeRequest, DecoderReport
from kvscribe.errors import KvscribeError
from kvscribe.serve.api_errors import ApiError, from_kvscribe
from kvscribe.serve.kv_ledger import KvLedger
from kvscribe.types import Segment


@dataclass(frozen=True)
class QueueLimits:
    requests: int = 64  # waiting to start
    audio_seconds: float = 4 * 3600.0  # of the requests waiting to start
    running: int = 4  # long requests a lane decodes in turn


@dataclass(frozen=True)
class Started:
    language: str
    probability: float | None


@dataclass(frozen=True)
class Decoded:
    segment: Segment


@dataclass(frozen=True)
class Finished:
    report: DecoderReport
    decode_seconds: float  # a shared group's time split by audio: derived
    first_segment_seconds: float | None


@dataclass(frozen=True)
class Failed:
    error: ApiError


Event = Started | Decoded | Finished | Failed


@dataclass(eq=False)
class Job:
    audio: np.ndarray
    request: DecodeRequest
    sink: Callable[[Event], None]
    cancelled: threading.Event = field(default_factory=threading.Event)
    submitted: float = field(default_factory=time.perf_counter)
    # A realtime session's buffer (kvscribe.serve.realtime): decoded one row as `kvscribe
    # mic` decodes it (Backend.transcribe), never in a shared batch.
    live: bool = False

    @property
    def seconds(self) -> float:
        return self.audio.size / SAMPLE_RATE

    @property
    def short(self) -> bool:
        return self.seconds <= MAX_SECONDS


@dataclass(eq=False)
class _Running:
    job: Job
    segments: Iterator[Segment]
    report: DecoderReport
    started: float
    kv_cost: int  # bytes reserved in the KV budget
    first: float | None = None


class _Lane:
    def __init__(self, backend, takes_long: bool):
        self.backend = backend
        self.takes_long = takes_long
        self.running: list[_Running] = []
        self.rows = 0  # short requests in the batch it decodes now
        self.group_cost = 0  # their bytes reserved in the KV budget


class Scheduler:
    def __init__(
        self, backends: list, limits: QueueLimits = QueueLimits(), kv: KvLedger | None = None
    ):
        self.limits = limits
        self.kv = kv or KvLedger(None, None)
        last = len(backends) - 1
        self._lanes = [_Lane(b, takes_long=i < last or last == 0) for i, b in enumerate(backends)]
        self._waiting: deque[Job] = deque()
        self._wake = threading.Condition()
        self._draining = False
        self._stopped = False
        self.audio_seconds_decoded = 0.0
        self._busy = 0.0  # seconds the lanes spent decoding, summed
        self._threads = [
            threading.Thread(
                target=self._loop, args=(lane,), name=f"kvscribe-lane-{i}", daemon=True
            )
            for i, lane in enumerate(self._lanes)
        ]
        for thread in self._threads:
            thread.start()

    # -- what the web side calls ---------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue `job`, or raise ApiError: 503 while draining, 429 past the queue's bounds."""
        with self._wake:
            if self._draining:
                raise ApiError(503, "the server is shutting down", None, "shutting_down", 5)
            queued = sum(j.seconds for j in self._waiting)
            if (
                len(self._waiting) >= self.limits.requests
                or queued + job.seconds > self.limits.audio_seconds
            ):
                raise ApiError(
                    429,
                    f"the queue is full ({len(self._waiting)} requests, {queued:.0f} s of "
                    "audio waiting): retry later",
                    None,
                    "queue_full",
                    retry_after=self._retry_after(queued),
                )
            self._waiting.append(job)
            self._wake.notify_all()

    def _retry_after(self, queued: float) -> int:
        """Seconds until the work ahead is likely done: its audio at the lanes' measured
        pace (busy seconds per audio second; a guess of 0.1 before anything finished)."""
        pace = self._busy / self.audio_seconds_decoded if self.audio_seconds_decoded else 0.1
        ahead = queued + sum(r.job.seconds for lane in self._lanes for r in lane.running)
        return max(1, math.ceil(pace * ahead / len(self._lanes)))

    def cancel(self, job: Job) -> None:
        """The client is gone: drop `job` if it waits, stop it at its next turn if it runs."""
        job.cancelled.set()
        with self._wake:
            self._wake.notify_all()

    @property
    def lanes(self) -> int:
        return len(self._lanes)

    @property
    def backend(self):
        """A lane's backend, for what decodes nothing (its notes on a request)."""
        return self._lanes[0].backend

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return sum(len(lane.running) for lane in self._lanes)

    @property
    def rows_in_flight(self) -> int:
        return sum(lane.rows for lane in self._lanes)

    @property
    def draining(self) -> bool:
        return self._draining

    def begin_draining(self) -> None:
        """From now on, new requests are answered 503."""
        with self._wake:
            self._draining = True

    def drain(self, timeout: float) -> bool:
        """Answer new requests 503 and wait for the queued and running ones to finish."""
        deadline = time.monotonic() + timeout
        with self._wake:
            self._draining = True
            while self._waiting or self.running or self.rows_in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.wait(min(left, 0.1))
        return True

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)

    # -- a lane's thread -----------------------------------------------------------------

    def _loop(self, lane: _Lane) -> None:
        while True:
            with self._wake:
                while not self._stopped and not self._has_work(lane):
                    self._wake.wait()
                if self._stopped:
                    return
                group, starting = self._take(lane)
            began = time.perf_counter()
            if group:
                self._decode_together(lane, group)
                self._group_done(lane)
            for job, kv_cost in starting:
                self._start(lane, job, kv_cost)
            self._turn(lane)
            with self._wake:
                self._busy += time.perf_counter() - began
                self._wake.notify_all()  # drain() and idle lanes wait on this condition

    def _has_work(self, lane: _Lane) -> bool:
        if lane.running or any(job.cancelled.is_set() for job in self._waiting):
            return True
        if any(self._shares(lane, job) for job in self._waiting) and self.kv.admits(1):
            return True
        first = next(iter(self._long_ones(lane)), None)  # long jobs start in order
        return first is not None and self.kv.admits(self._rows(lane, first))

    def _long_ones(self, lane: _Lane) -> list[Job]:
        """The waiting jobs this lane would start running, in order."""
        return [j for j in self._waiting if not self._shares(lane, j) and self._fits(lane, j)]

    def _fits(self, lane: _Lane, job: Job) -> bool:
        return job.cancelled.is_set() or job.short or lane.takes_long

    @staticmethod
    def _rows(lane: _Lane, job: Job) -> int:
        """The rows a request that runs alone decodes at once: its batches' size (a live
        buffer: one)."""
        return 1 if job.live else lane.backend.batch_size_for(job.request, job.seconds)

    def _take(self, lane: _Lane) -> tuple[list[Job], list[tuple[Job, int]]]:
        """(short jobs to decode together now, jobs to start running on this lane with their
        KV reservations); called locked, the group's reservation kept on the lane. Cancelled
        jobs waiting are dropped here."""
        for job in [j for j in self._waiting if j.cancelled.is_set()]:
            self._waiting.remove(job)
        group = []
        shared = next((j for j in self._waiting if self._shares(lane, j)), None)
        if shared is not None:
            group = [
                j for j in self._waiting if self._shares(lane, j) and j.request == shared.request
            ]
            if not lane.backend.capabilities.rows_independent:
                group = group[:1]  # a request's tokens must not depend on the others
            group = group[: self.kv.rows_free(len(group))]
        lane.group_cost = self.kv.reserve(len(group))
        lane.rows = len(group)
        for job in group:
            self._waiting.remove(job)
        return group, self._starting(lane)

    def _starting(self, lane: _Lane) -> list[tuple[Job, int]]:
        """Long jobs (and short ones that do not share) to start on the lane, in order,
        each with the KV bytes it reserved; the first that does not fit stops the rest.
        A short request that shares batches waits for a group of its own: decoded in a
        batch alone or with others, never on the path a long one takes."""
        starting = []
        room = self.limits.running - len(lane.running)
        for job in self._long_ones(lane):
            rows = self._rows(lane, job)
            if len(starting) == room or not self.kv.admits(rows):
                break
            starting.append((job, self.kv.reserve(rows)))
            self._waiting.remove(job)
        return starting

    @staticmethod
    def _shares(lane: _Lane, job: Job) -> bool:
        return job.short and not job.live and lane.backend.shares_batches(job.request)

    def _decode_together(self, lane: _Lane, group: list[Job]) -> None:
        started = time.perf_counter()
        try:
            runs = lane.backend.transcribe_together([j.audio for j in group], group[0].request)
            finished = [(run, list(run.segments)) for run in runs]
        except Exception:
            if len(group) > 1:
                for job in group:
                    self._decode_together(lane, [job])
            else:
                group[0].sink(_failure())
            return
        elapsed = time.perf_counter() - started
        total = sum(j.seconds for j in group) or 1.0
        for job, (run, segments) in zip(group, finished, strict=True):
            run.report.not_applicable += lane.backend.unhonoured(job.request, math.inf)
            run.report.settings[row.SHARED_WITH] = f"{len(group) - 1} other requests"
            job.sink(Started(run.language, run.language_probability))
            for segment in segments:
                job.sink(Decoded(segment))
            self._decoded(job)  # counted before the answer: a client may read /metrics next
            job.sink(Finished(run.report, elapsed * job.seconds / total, elapsed))

    def _group_done(self, lane: _Lane) -> None:
        """The group's rows are gone (decoded, or failed one by one): its bytes go back."""
        lane.rows = 0
        self.kv.release(lane.group_cost)
        lane.group_cost = 0

    def _start(self, lane: _Lane, job: Job, kv_cost: int) -> None:
        from kvscribe.pipeline import transcribe_speech

        started = time.perf_counter()
        try:
            if job.live:
                run = lane.backend.transcribe(job.audio, job.request)
            else:
                run = transcribe_speech(lane.backend, job.audio, job.request)
        except Exception:
            self.kv.release(kv_cost)
            job.sink(_failure())
            return
        job.sink(Started(run.language, run.language_probability))
        lane.running.append(_Running(job, iter(run.segments), run.report, started, kv_cost))

    def _turn(self, lane: _Lane) -> None:
        """One segment of each job running on the lane, in order; finished and cancelled
        ones leave."""
        for running in list(lane.running):
            job = running.job
            if job.cancelled.is_set():
                self._leave(lane, running)
                continue
            try:
                segment = next(running.segments)
            except StopIteration:
                elapsed = time.perf_counter() - running.started
                self._decoded(job)  # counted before the answer, as above
                job.sink(Finished(running.report, elapsed, running.first))
                self._leave(lane, running)
                continue
            except Exception:
                job.sink(_failure())
                self._leave(lane, running)
                continue
            if running.first is None:
                running.first = time.perf_counter() - running.started
            job.sink(Decoded(segment))

    def _decoded(self, job: Job) -> None:
        with self._wake:
            self.audio_seconds_decoded += job.seconds

    def _leave(self, lane: _Lane, running: _Running) -> None:
        close = getattr(running.segments, "close", None)
        if close is not None:
            close()  # a generator's engine state (its rows, its audio) goes now
        lane.running.remove(running)
        self.kv.release(running.kv_cost)


def _failure() -> Failed:
    """The exception being handled, as this request's error."""
    exc = sys.exc_info()[1]
    if isinstance(exc, ApiError):
        return Failed(exc)
    if isinstance(exc, KvscribeError):
        return Failed(from_kvscribe(exc))
    message = f"the engine failed on this request: {type(exc).__name__}: {exc}"
    return Failed(ApiError(500, message, None, "engine_error"))
