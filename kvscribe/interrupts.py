"""Ctrl-C and SIGTERM that a native library swallowed, raised again.

CPython runs a signal's Python handler on the main thread, wherever it is, and the
handler's exception goes up from there. Inside PyAV's resampler (its filter graph's
`pull`, FFmpeg's EAGAIN turned into an exception) that exception can be lost: the call
returns as if nothing had happened. Measured with SIGTERM sent at a random moment of a
decode, 20 signals in 835 vanished on an AMD EPYC
(`benchmarks/results/swallowed_interrupts.md`), and a run told to stop went on
transcribing an 18-minute recording. So the handlers kvscribe installs count what they
raise (`raising`), and the code that calls such a library checks, after each call, that
nothing raised meanwhile went missing (`unswallowed`).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_raised = 0  # how many interrupts the handlers have raised in this process
_last: KeyboardInterrupt | None = None


def raising(stop: KeyboardInterrupt) -> KeyboardInterrupt:
    """`stop`, counted: a handler raises what this returns."""
    global _raised, _last
    _raised, _last = _raised + 1, stop
    return stop


def on_sigint(number, frame) -> None:
    """Ctrl-C's handler: Python's own (a KeyboardInterrupt), counted."""
    raise raising(KeyboardInterrupt())


def mark() -> int:
    return _raised


def raise_if_swallowed(since: int) -> None:
    """Raise again the interrupt raised since `since` that did not come out of the call made
    in between. Only the main thread runs handlers, so only its calls can have lost one."""
    if _raised != since and _last is not None and _on_main_thread():
        raise _last


def unswallowed(items: Iterator[T]) -> Iterator[T]:
    """`items`, each step watched (closed with this iterator)."""
    try:
        while True:
            since = mark()
            try:
                item = next(items)
            except StopIteration:
                raise_if_swallowed(since)
                return
            raise_if_swallowed(since)
            yield item
    finally:
        close = getattr(items, "close", None)
        if close is not None:
            close()


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
