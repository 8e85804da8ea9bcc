"""The engine thread: one thread owns the loaded backend and decodes every request's audio.

Requests of 30 s or less whose decoding may be shared (Backend.shares_batches) are decoded
side by side, in the batches a long file's speech chunks use (Backend.transcribe_together),
with the other short requests waiting with the same decoding choices; a short request is
always decoded this way, alone or not, so its text does not depend on the load. Longer
requests are decoded a segment at a time, in turn with the other running ones, and the
short requests waiting go before each turn: a short request waits for one turn of each
long one (a group of speech chunks), never for a long one to finish.

Everything a request learns comes as events, on the engine thread, through its `sink`.
"""

from __future__ import annotations

import math
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
from kvscribe.types import Segment


@dataclass(frozen=True)
class QueueLimits:
    requests: int = 64  # waiting to start
    audio_seconds: float = 4 * 3600.0  # of the requests waiting to start
    running: int = 4  # long requests decoded in turn


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

    @property
    def seconds(self) -> float:
        return self.audio.size / SAMPLE_RATE


@dataclass(eq=False)
class _Running:
    job: Job
    segments: Iterator[Segment]
    report: DecoderReport
    started: float
    first: float | None = None


class Scheduler:
    def __init__(self, backend, limits: QueueLimits = QueueLimits()):
        self.backend = backend
        self.limits = limits
        self._waiting: deque[Job] = deque()
        self._running: list[_Running] = []
        self._wake = threading.Condition()
        self._draining = False
        self._stopped = False
        self.audio_seconds_decoded = 0.0
        self.rows_in_flight = 0  # requests whose audio the engine holds now
        self._busy = 0.0  # seconds the engine thread spent decoding
        self._thread = threading.Thread(target=self._loop, name="kvscribe-engine", daemon=True)
        self._thread.start()

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
            self._wake.notify()

    def _retry_after(self, queued: float) -> int:
        """Seconds until the work ahead is likely done: its audio at the engine's measured
        pace (busy seconds per audio second; a guess of 0.1 before anything finished)."""
        pace = self._busy / self.audio_seconds_decoded if self.audio_seconds_decoded else 0.1
        ahead = queued + sum(r.job.seconds for r in self._running)
        return max(1, math.ceil(pace * ahead))

    def cancel(self, job: Job) -> None:
        """The client is gone: drop `job` if it waits, stop it at its next turn if it runs."""
        job.cancelled.set()
        with self._wake:
            self._wake.notify()

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        return len(self._running)

    def begin_draining(self) -> None:
        """From now on, new requests are answered 503."""
        with self._wake:
            self._draining = True

    def drain(self, timeout: float) -> bool:
        """Answer new requests 503 and wait for the queued and running ones to finish."""
        deadline = time.monotonic() + timeout
        with self._wake:
            self._draining = True
            while self._waiting or self._running or self.rows_in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._wake.wait(min(left, 0.1))
        return True

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()
        self._thread.join(timeout=30)

    # -- the engine thread ---------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopped and not self._waiting and not self._running:
                    self._wake.wait()
                if self._stopped:
                    return
                group, starting = self._take()
            began = time.perf_counter()
            if group:
                self._decode_together(group)
            for job in starting:
                self._start(job)
            self._turn()
            self._busy += time.perf_counter() - began
            with self._wake:
                self._wake.notify_all()  # drain() waits on this condition too

    def _take(self) -> tuple[list[Job], list[Job]]:
        """(short jobs to decode together now, long jobs to start running); called locked.
        Cancelled jobs waiting are dropped here."""
        for job in [j for j in self._waiting if j.cancelled.is_set()]:
            self._waiting.remove(job)
        group = []
        shared = next((j for j in self._waiting if self._shares(j)), None)
        if shared is not None:
            group = [j for j in self._waiting if self._shares(j) and j.request == shared.request]
        starting = []
        room = self.limits.running - len(self._running)
        for job in self._waiting:
            if job not in group and not self._shares(job) and len(starting) < room:
                starting.append(job)
        for job in (*group, *starting):
            self._waiting.remove(job)
        self.rows_in_flight = len(group)
        return group, starting

    def _shares(self, job: Job) -> bool:
        return job.seconds <= MAX_SECONDS and self.backend.shares_batches(job.request)

    def _decode_together(self, group: list[Job]) -> None:
        started = time.perf_counter()
        try:
            runs = self.backend.transcribe_together([j.audio for j in group], group[0].request)
            finished = [(run, list(run.segments)) for run in runs]
        except Exception:
            if len(group) > 1:
                for job in group:
                    self._decode_together([job])
                return
            raise_as = self._failure(group[0])
            group[0].sink(raise_as)
            self.rows_in_flight = 0
            return
        elapsed = time.perf_counter() - started
        total = sum(j.seconds for j in group) or 1.0
        for job, (run, segments) in zip(group, finished, strict=True):
            run.report.not_applicable += self.backend.unhonoured(job.request, math.inf)
            run.report.settings[row.SHARED_WITH] = f"{len(group) - 1} other requests"
            job.sink(Started(run.language, run.language_probability))
            for segment in segments:
                job.sink(Decoded(segment))
            share = elapsed * job.seconds / total
            job.sink(Finished(run.report, share, elapsed))
            self.audio_seconds_decoded += job.seconds
        self.rows_in_flight = 0

    def _start(self, job: Job) -> None:
        from kvscribe.pipeline import transcribe_speech

        started = time.perf_counter()
        try:
            run = transcribe_speech(self.backend, job.audio, job.request)
        except Exception:
            job.sink(self._failure(job))
            return
        job.sink(Started(run.language, run.language_probability))
        self._running.append(_Running(job, iter(run.segments), run.report, started))

    def _turn(self) -> None:
        """One segment of each running job, in order; finished and cancelled ones leave."""
        for running in list(self._running):
            job = running.job
            if job.cancelled.is_set():
                self._leave(running)
                continue
            try:
                segment = next(running.segments)
            except StopIteration:
                elapsed = time.perf_counter() - running.started
                job.sink(Finished(running.report, elapsed, running.first))
                self.audio_seconds_decoded += job.seconds
                self._leave(running)
                continue
            except Exception:
                job.sink(self._failure(job))
                self._leave(running)
                continue
            if running.first is None:
                running.first = time.perf_counter() - running.started
            job.sink(Decoded(segment))

    def _leave(self, running: _Running) -> None:
        close = getattr(running.segments, "close", None)
        if close is not None:
            close()  # a generator's engine state (its rows, its audio) goes now
        self._running.remove(running)

    @staticmethod
    def _failure(job: Job) -> Failed:
        """The exception being handled, as this request's error."""
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ApiError):
            return Failed(exc)
        if isinstance(exc, KvscribeError):
            return Failed(from_kvscribe(exc))
        message = f"the engine failed on this request: {type(exc).__name__}: {exc}"
        return Failed(ApiError(500, message, None, "engine_error"))
