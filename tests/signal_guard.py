"""No test may leave the pytest process deaf to Ctrl-C.

A process started by a test inherits its parent's ignored signals and its blocked-signal
mask: a test that left SIGINT ignored or blocked here makes every later test's `kvscribe`
deaf to Ctrl-C, and those tests fail, not the one that did it. Each test is checked before
(a module or session fixture may have done it) and after; the state is put back either way,
so the next test starts clean.

A suite started in the background (`pytest &` from a script) inherits SIGINT ignored, as
the shell sets it for background jobs: every `kvscribe` the tests start would then be deaf
to the Ctrl-C some of them send. The pytest process hears it again first.
"""

from __future__ import annotations

import signal

import pytest

WATCHED = (signal.SIGINT, signal.SIGTERM)


def _state() -> tuple:
    handlers = tuple(signal.getsignal(number) for number in WATCHED)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, []) & set(WATCHED)
    return handlers, frozenset(blocked)


if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
CLEAN = _state()  # as the pytest process starts, Ctrl-C heard


def _restore() -> None:
    for number, handler in zip(WATCHED, CLEAN[0], strict=True):
        if handler is not None:
            signal.signal(number, handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(WATCHED) - CLEAN[1])


@pytest.fixture(autouse=True)
def signals_as_found(request):
    before = _state()
    if before != CLEAN:
        _restore()
        pytest.fail(f"signal handlers or mask changed before {request.node.nodeid}: {before}")
    yield
    after = _state()
    if after != CLEAN:
        _restore()
        pytest.fail(f"{request.node.nodeid} left signal handlers or mask changed: {after}")
