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

An interrupt can be lost in Python too: a cleanup that fails while it goes up (a
`finally` closing a file a worker thread still reads) replaces it with its own error, and
a broad `except Exception` then took the stopped run for a failed file and went on (a
Ctrl-C into `-o` decoded the rest of an 18-minute recording: tests/test_termination.py's
rare hangs). `behind` finds the interrupt in the error's chain.
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


def behind(error: BaseException | None) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM (a KeyboardInterrupt) `error` is, or was raised while handling
    (its cause or context, a few links deep), or None."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, KeyboardInterrupt):
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def raise_if_behind(error: BaseException) -> None:
    """Raise the interrupt `error` was raised while handling, if any: a broad catch calls
    this first, so a stopped run stops instead of failing one file and going on."""
    stop = behind(error)
    if stop is not None:
        raise stop


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
