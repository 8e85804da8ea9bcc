"""A `--jobs N` worker process's life: one Worker (kvscribe.batch.worker) loaded at its
start, its progress sent to the driver on a queue, born deaf to Ctrl-C until loaded, and
gone with its driver (kvscribe.batch.executors.ProcessPool starts and stops them)."""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import multiprocessing.queues
import os
import signal
import threading
from collections.abc import Iterator

from kvscribe.batch.worker import Result, Task, Worker
from kvscribe.errors import ExitCode
from kvscribe.options import TranscribeOptions
from kvscribe.types import Segment

_WORKER: Worker | None = None
_PROGRESS: multiprocessing.queues.SimpleQueue | None = None


def init_process(
    options: TranscribeOptions, threads: int, progress: multiprocessing.queues.SimpleQueue
) -> None:
    """Runs once in each worker process: share the cores, load the model, keep the queue
    that carries progress to the driver (kvscribe.batch.executors.ProcessPool drains it)."""
    global _WORKER, _PROGRESS
    _exit_with_the_driver()
    os.environ["OMP_NUM_THREADS"] = str(threads)
    _PROGRESS = progress
    _WORKER = Worker(options)
    _hear_ctrl_c_from_now_on()


def _exit_with_the_driver() -> None:
    """A driver killed outright (kill -9, the OOM killer, a supervisor's timeout) cannot stop
    its workers: each watches the driver and exits with it, rather than hold its model for
    good."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(ExitCode.INTERRUPTED)

    threading.Thread(target=watch, name="kvscribe-driver-watch", daemon=True).start()


def _hear_ctrl_c_from_now_on() -> None:
    """Workers start with Ctrl-C blocked (kvscribe.batch.executors): one that arrives while
    they import and load their model would print their tracebacks over the driver's one
    line. One that came meanwhile is dropped here and answered as the worker's first task
    (KeyboardInterrupt, sent back to the driver as that task's result: nothing printed
    here, and no worker dies, which the pool would call broken)."""
    global _INTERRUPTED
    if not hasattr(signal, "pthread_sigmask"):
        return
    _INTERRUPTED = signal.SIGINT in signal.sigpending()
    signal.signal(signal.SIGINT, _stop_the_task_in_hand)  # idle now: a pending one is dropped
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _stop_the_task_in_hand(signum: int, frame: object) -> None:
    """Ctrl-C stops the task this worker runs; an idle worker, waiting for its next one,
    ignores it (a KeyboardInterrupt there killed it with a traceback on the terminal): the
    driver heard the Ctrl-C too, and shuts the pool down."""
    if _BUSY:
        raise KeyboardInterrupt


_INTERRUPTED = False  # a Ctrl-C came while this worker started
_BUSY = False  # a task is running


@contextlib.contextmanager
def _busy() -> Iterator[None]:
    global _BUSY
    _BUSY = True
    try:
        _unless_interrupted()
        yield
    finally:
        _BUSY = False


def _unless_interrupted() -> None:
    if _INTERRUPTED:
        raise KeyboardInterrupt


def shares_in_process() -> bool:
    assert _WORKER is not None
    with _busy():
        return _WORKER.shares_batches()


def work_in_process(parcel: list[Task]) -> list[Result]:
    assert _WORKER is not None
    with _busy():
        return _WORKER.work_parcel(parcel, report=_send_progress)


def _send_progress(task: Task, done: float, duration: float, segment: Segment | None) -> None:
    """A SimpleQueue's put is written to the pipe before it returns (no feeder thread), so
    a task's progress is there before its result: the driver shows them in that order."""
    assert _PROGRESS is not None
    with contextlib.suppress(OSError):  # the driver is gone: the work is moot, not failed
        _PROGRESS.put((task, done, duration, segment))
