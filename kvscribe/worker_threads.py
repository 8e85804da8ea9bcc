"""Worker threads the main thread waits on without going deaf to Ctrl-C and SIGTERM.

CPython runs a signal's Python handler on the main thread only, between its bytecodes.
A main thread inside one long engine call (a whole batch's decode on one thread: over a
minute on a loaded machine) heard Ctrl-C or SIGTERM only when the call returned; and a
signal that landed on a worker thread was heard once the main thread next took the GIL,
which a main thread blocked in `Future.result()` did when the stage it waited on ended;
`with ThreadPoolExecutor` then waited for every task still running. So `off_main` runs a
long call on a thread of its own; `result`, `join` and `get` wake every POLL_SECONDS; and
`pool`, left by an interrupt, cancels what has not started and waits for nothing: the
interrupted command ends the process (kvscribe.cli.quick_exit).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TypeVar

POLL_SECONDS = 0.1

T = TypeVar("T")


def result(future: Future[T]) -> T:
    """`future.result()`, waited for in short steps (a TimeoutError the task itself raised
    is its result, not a reason to wait on)."""
    while not wait([future], timeout=POLL_SECONDS).done:
        pass
    return future.result()


def off_main(work: Callable[..., T], *args) -> T:
    """`work(*args)` on a thread of its own, waited for as `result` waits: one long engine
    call (a whole batch's decode on one thread) held the main thread, and Ctrl-C with it,
    until it returned (over a minute on a loaded machine)."""
    with pool(1) as executor:
        return result(executor.submit(work, *args))


def join(thread: threading.Thread) -> None:
    while thread.is_alive():
        thread.join(POLL_SECONDS)


def get(items: queue.Queue[T]) -> T:
    while True:
        with contextlib.suppress(queue.Empty):
            return items.get(timeout=POLL_SECONDS)


@contextlib.contextmanager
def pool(workers: int, name: str = "") -> Iterator[ThreadPoolExecutor]:
    """A ThreadPoolExecutor that an interrupt leaves at once. Any other error still waits
    for the running tasks: the engines they use go on serving the next input."""
    executor = ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        yield executor
    except KeyboardInterrupt:  # Ctrl-C, and SIGTERM (kvscribe.errors.Terminated)
        executor.shutdown(wait=False, cancel_futures=True)
        raise
    except BaseException:
        executor.shutdown(wait=True, cancel_futures=True)
        raise
    executor.shutdown(wait=True)
