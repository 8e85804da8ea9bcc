"""Ending the `kvscribe` process without tearing the interpreter down.

Once a command has finished (outputs written and closed, manifest closed, stats shown),
Python's normal exit still frees every module and object one by one, and the engines'
libraries run their own destructors: with torch loaded that took 0.46 s, an eighth of a
50 s recording's whole run (docs/backends.md, "Ending the process"). So the command runs
the `atexit` handlers, flushes its streams and ends at once, but only when nothing else
is still running: another non-daemon thread or a child process means the normal exit,
which waits for them. An interrupted command (Ctrl-C, SIGTERM) waits for nothing: what
it finished is written, so worker processes still running are killed and threads still
decoding end with the process. The normal exit would wait for them, and a Ctrl-C pressed
again meanwhile broke it: a batch's workers hung on for good, and a native thread torn
down mid-call aborted (134) or crashed (139).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
from typing import NoReturn

from kvscribe.errors import ExitCode


def exit_code(exit: SystemExit) -> int:
    """The status Python's own exit gives for `exit` (a message is printed, status 1)."""
    code = exit.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


def alone() -> bool:
    """Nothing else is running: no other non-daemon thread, no child process."""
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    if any(not t.daemon for t in others):
        return False
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is None or not multiprocessing.active_children()


_INTERRUPTED = (ExitCode.INTERRUPTED, ExitCode.TERMINATED)


def leave(code: int) -> NoReturn:
    """End the process with status `code`: at once when `alone()` or interrupted, else the
    normal way."""
    if code in _INTERRUPTED:
        for number in (signal.SIGINT, signal.SIGTERM):  # a further one cannot stop the exit
            signal.signal(number, signal.SIG_IGN)
        _kill_children()
    elif not alone():
        sys.exit(code)
    atexit._run_exitfuncs()  # what the normal exit would run (logging, Ray, temp folders)
    for stream in (sys.stdout, sys.stderr):
        # A closed pipe (`| head`): nothing more can reach it.
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def _kill_children() -> None:
    """Kill the worker processes still running (their unfinished files are not recorded,
    and a rerun removes their partial files), and wait for them: nothing is left behind."""
    multiprocessing = sys.modules.get("multiprocessing")
    children = multiprocessing.active_children() if multiprocessing is not None else []
    for child in children:
        with contextlib.suppress(OSError):
            child.kill()
    for child in children:
        child.join(timeout=5)
