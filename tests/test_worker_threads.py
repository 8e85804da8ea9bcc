"""A signal that lands on a worker thread still stops the main thread's wait at once
(kvscribe/worker_threads.py). CI's stop test timed out at 60 s this way: CPython runs
the handler on the main thread only once it next takes the GIL, and a main thread
blocked in a plain `Future.result()` took it when the worker's task ended."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kvscribe import worker_threads

TASK_SECONDS = 4.0

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals: main only"
)


class Stop(KeyboardInterrupt):
    pass


def _raise_stop(number, frame):
    raise Stop


def _signal_worker_soon(worker: dict) -> None:
    """SIGUSR1 to the worker thread (not the process) 0.3 s from now."""

    def send():
        time.sleep(0.3)
        signal.pthread_kill(worker["ident"], signal.SIGUSR1)

    threading.Thread(target=send, daemon=True).start()


def _task(worker: dict) -> str:
    worker["ident"] = threading.get_ident()
    time.sleep(TASK_SECONDS)  # lets go of the GIL, as the engines' calls do
    return "done"


@pytest.fixture
def stop_on_sigusr1():
    before = signal.signal(signal.SIGUSR1, _raise_stop)
    yield
    signal.signal(signal.SIGUSR1, before)


def test_a_signal_on_a_worker_stops_the_wait_and_leaves_the_pool_at_once(stop_on_sigusr1):
    worker: dict = {}
    started = time.monotonic()
    with pytest.raises(Stop), worker_threads.pool(1) as pool:
        future = pool.submit(_task, worker)
        while "ident" not in worker:
            time.sleep(0.01)
        _signal_worker_soon(worker)
        worker_threads.result(future)
    assert time.monotonic() - started < TASK_SECONDS / 2  # neither the wait nor the pool
    assert not future.done()  # the task was left running, not waited for


def test_a_plain_wait_hears_the_same_signal_only_when_the_task_ends(stop_on_sigusr1):
    """What worker_threads exists for, shown on the plain executor: the same signal is
    heard only once the task has ended."""
    worker: dict = {}
    started = time.monotonic()
    with pytest.raises(Stop), ThreadPoolExecutor(1) as pool:
        future = pool.submit(_task, worker)
        while "ident" not in worker:
            time.sleep(0.01)
        _signal_worker_soon(worker)
        future.result()
    assert time.monotonic() - started >= TASK_SECONDS * 0.9


def test_join_and_get_hear_a_signal_on_another_thread(stop_on_sigusr1):
    import queue

    worker: dict = {}
    thread = threading.Thread(target=_task, args=(worker,), daemon=True)
    thread.start()
    while "ident" not in worker:
        time.sleep(0.01)
    started = time.monotonic()
    _signal_worker_soon(worker)
    with pytest.raises(Stop):
        worker_threads.join(thread)
    assert time.monotonic() - started < TASK_SECONDS / 2
    _signal_worker_soon(worker)
    with pytest.raises(Stop):
        worker_threads.get(queue.Queue())
    assert time.monotonic() - started < TASK_SECONDS / 2  # the task sleeps on meanwhile


def test_an_error_other_than_an_interrupt_still_waits_for_the_running_task():
    """The engines a task uses serve the next input: only an interrupt leaves one running."""
    with pytest.raises(ValueError), worker_threads.pool(1) as pool:
        future = pool.submit(time.sleep, 0.5)
        raise ValueError
    assert future.done()


def test_a_task_s_own_timeout_error_is_its_result():
    def late():
        raise TimeoutError("the task's own")

    with worker_threads.pool(1) as pool, pytest.raises(TimeoutError, match="task's own"):
        worker_threads.result(pool.submit(late))
