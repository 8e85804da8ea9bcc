"""Where a batch's transcription runs on this machine: in this process, or in N spawned
worker processes sharing its cores (one loaded model each). A worker takes files in
parcels: several short files at once where its backend decodes them side by side
(docs/batch.md, "Short files share batches"), else one at a time. The Ray cluster
executor (kvscribe.cluster) follows the same Executor protocol.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import multiprocessing.queues
import os
import signal
from collections.abc import Iterator
from typing import Protocol

from kvscribe import profile as profiles
from kvscribe.batch.worker import Result, Task, Worker
from kvscribe.batch.worker_process import init_process, shares_in_process, work_in_process
from kvscribe.contract import DecodeRequest, completed
from kvscribe.errors import EngineError
from kvscribe.options import TranscribeOptions
from kvscribe.types import Segment


class TaskEvents(Protocol):
    """What an executor tells as it goes: a task handed to a worker, how far its worker is
    through the task's audio (`segment`: the one just final, None when decoding begins; told
    before the task's Result), and (the cluster executor only) a task handed out again
    because the worker holding it was lost."""

    def started(self, task: Task) -> None: ...
    def progress(
        self, task: Task, seconds_done: float, duration: float, segment: Segment | None
    ) -> None: ...
    def retrying(self, task: Task, attempt: int, attempts: int, reason: str) -> None: ...


class Executor(Protocol):
    """Where the transcription runs: yields one Result per task, in any order, telling
    `events` as tasks are handed out. Closing the iterator stops the work once the tasks
    in progress end; an interrupt thrown into it (Ctrl-C, SIGTERM) stops it at once."""

    def results(self, todo: list[Task], events: TaskEvents) -> Iterator[Result]: ...


def local_executor(options: TranscribeOptions, jobs: int) -> Executor:
    """One input (or --jobs 1) runs in this process, more in `jobs` worker processes."""
    return InProcess(options) if jobs <= 1 else ProcessPool(options, jobs)


def batch_size(options: TranscribeOptions) -> int:
    """The speech chunks a worker decodes at once: --batch-size, else the profile's."""
    section = profiles.load(options.profile).settings_for(options.backend)
    return completed(DecodeRequest(batch_size=options.batch_size), section).batch_size


def parcels(
    todo: list[Task], options: TranscribeOptions, workers: int, shared: bool
) -> list[list[Task]]:
    """`todo` in the parcels workers take whole. Where the workers' short files share
    batches (`shared`: Worker.shares_batches), as many files as a batch holds speech chunks
    (a short file is a chunk or two), fewer where the files would not go round every
    worker; else one file each, so the last files spread over every worker."""
    if not shared:
        return [[task] for task in todo]
    size = parcel_size(options, len(todo), workers)
    return [todo[first : first + size] for first in range(0, len(todo), size)]


def parcel_size(options: TranscribeOptions, waiting: int, workers: int) -> int:
    """How many of `waiting` files a worker whose short files share batches takes at once:
    as many as a batch holds chunks, fewer where the files would not go round every
    worker."""
    return max(1, min(batch_size(options), -(-waiting // max(1, workers))))


class InProcess:
    def __init__(self, options: TranscribeOptions):
        self.options = options

    def results(self, todo: list[Task], events: TaskEvents) -> Iterator[Result]:
        worker = Worker(self.options, todo[0].path if todo else None)
        for parcel in parcels(todo, self.options, 1, worker.shares_batches()):
            for task in parcel:
                events.started(task)
            yield from worker.work_parcel(parcel, report=events.progress)


class ProcessPool:
    """`jobs` spawned worker processes sharing this machine's cores, one model each; their
    progress comes back on a queue that this process drains while it waits for results."""

    POLL_SECONDS = 0.1  # how late a worker's progress may show

    def __init__(self, options: TranscribeOptions, jobs: int):
        self.options = options
        self.jobs = jobs

    def results(self, todo: list[Task], events: TaskEvents) -> Iterator[Result]:
        threads = max(1, (os.cpu_count() or 2) // self.jobs)
        context = multiprocessing.get_context("spawn")
        progress = context.SimpleQueue()
        pool = cf.ProcessPoolExecutor(
            max_workers=self.jobs,
            mp_context=context,
            initializer=init_process,
            initargs=(self.options, threads, progress),
        )
        pending: dict[cf.Future, list[Task]] = {}
        interrupted = False
        try:  # from the first submit on: an interrupt anywhere still shuts the pool down
            shared = _first_worker_shares(pool)
            queue = list(reversed(parcels(todo, self.options, self.jobs, shared)))
            while queue or pending:
                while queue and len(pending) < self.jobs:  # one per worker: submitted = started
                    parcel = queue.pop()
                    for task in parcel:
                        events.started(task)
                    try:
                        with _workers_born_deaf_to_ctrl_c():
                            pending[pool.submit(work_in_process, parcel)] = parcel
                    except cf.process.BrokenProcessPool:  # a worker died as it started
                        yield Result(parcel[0], error=_worker_died(), fatal=True)
                        return
                finished, _ = cf.wait(
                    pending, timeout=self.POLL_SECONDS, return_when=cf.FIRST_COMPLETED
                )
                _relay(progress, events)  # a finished parcel's progress is queued by now
                for future in finished:
                    parcel = pending.pop(future)
                    try:
                        yield from future.result()
                    except cf.process.BrokenProcessPool:
                        yield Result(parcel[0], error=_worker_died(), fatal=True)
                        return
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM, here or thrown in by the caller
            interrupted = True
            raise
        finally:
            _shut_down(pool, pending, progress, interrupted)


def _first_worker_shares(pool: cf.ProcessPoolExecutor) -> bool:
    """Whether the workers' short files share batches (they are alike: the first says)."""
    with _workers_born_deaf_to_ctrl_c():
        first = pool.submit(shares_in_process)
    try:
        return first.result()
    except cf.process.BrokenProcessPool:
        return False  # the first task's result says the worker died


@contextlib.contextmanager
def _workers_born_deaf_to_ctrl_c() -> Iterator[None]:
    """Ctrl-C blocked while `submit` may start a worker process: the worker inherits the
    block through fork and exec, and lifts it once its model is loaded
    (kvscribe.batch.worker_process.init_process). A Ctrl-C meanwhile reaches this process
    when the block is lifted here."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _relay(progress: multiprocessing.queues.SimpleQueue, events: TaskEvents | None) -> None:
    """Hand what the workers queued to `events` (None: drop it)."""
    while not progress.empty():
        message = progress.get()
        if events is not None:
            events.progress(*message)


def _shut_down(
    pool: cf.ProcessPoolExecutor,
    pending: dict,
    progress: multiprocessing.queues.SimpleQueue,
    interrupted: bool,
) -> None:
    """Stop the pool once the files in progress are done (nothing else is submitted): their
    workers still report, and one whose queue's pipe is full would block, so keep draining.
    An interrupt waits for nothing: the interrupted command kills the workers as it ends
    (kvscribe.cli.quick_exit). A worker answers Ctrl-C at once, but its process's exit
    waited for the engine thread it left decoding (kvscribe.worker_threads.off_main): over
    60 s on a loaded machine."""
    if interrupted:
        pool.shutdown(wait=False, cancel_futures=True)
        return
    running = set(pending)
    while running:
        running = cf.wait(running, timeout=ProcessPool.POLL_SECONDS).not_done
        _relay(progress, None)
    pool.shutdown(wait=True, cancel_futures=True)
    progress.close()


def _worker_died() -> EngineError:
    return EngineError(
        "a worker process died (killed, or out of memory?)",
        subject="--jobs",
        hint="rerun to resume; fewer --jobs use less memory",
    )
