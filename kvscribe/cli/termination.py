"""SIGTERM stops a command as Ctrl-C does.

Python's default for SIGTERM ends the process at once: no `finally` runs, so stdin's
spool (a copy of the whole recording), an output's temporary part and the batch summary
were left behind, and `--jobs` workers finished their files for nobody. Raised as
`Terminated` (a KeyboardInterrupt) instead, it takes Ctrl-C's path: outputs finished
stay, nothing partial is left, and the status is 143. `mic` and `serve` install their
own handlers for as long as they run (kvscribe.cli.live, kvscribe.serve.draining).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

from kvscribe import interrupts
from kvscribe.errors import ExitCode, Terminated, by_sigterm


@contextlib.contextmanager
def sigterm_stops_like_ctrl_c() -> Iterator[None]:
    """While inside (the main thread only: no other may set a handler), SIGTERM raises
    `Terminated`; the handler before is restored after (a caller in the same process).
    An exit that an interrupt caused, which typer turns into a silent exit 130, says so in
    one line: "interrupted" (130), or "stopped by SIGTERM" (143)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    Terminated.seen = False  # a caller in the same process may have stopped one before
    before = signal.signal(signal.SIGTERM, _terminate)
    # Ctrl-C's own handler, counted as SIGTERM's is (kvscribe.interrupts); one set before
    # (ignored in a background job, a caller's own) stays.
    counted = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if counted:
        signal.signal(signal.SIGINT, interrupts.on_sigint)
    try:
        yield
    except BaseException as stopped:
        typer_130 = isinstance(stopped, SystemExit) and stopped.code == ExitCode.INTERRUPTED
        # typer's exit 130 is raised from it; an error is one a cleanup raised while it went
        # up (kvscribe.interrupts.behind); a command's own exit (a batch's summary) stays
        cause = interrupts.behind(stopped)
        if cause is None or not (typer_130 or stopped is cause or isinstance(stopped, Exception)):
            raise
        sigterm = by_sigterm(cause)
        sys.stderr.write(stopped_line(sigterm))  # typer's exit 130 says nothing
        raise SystemExit(ExitCode.TERMINATED if sigterm else ExitCode.INTERRUPTED) from None
    finally:
        signal.signal(signal.SIGTERM, before)
        if counted:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def stopped_line(sigterm: bool) -> str:
    """What a command stopped by Ctrl-C or SIGTERM says last, on stderr."""
    return "kvscribe: stopped by SIGTERM\n" if sigterm else "kvscribe: interrupted\n"


def _terminate(number, frame) -> None:
    Terminated.seen = True
    _pass_on_to_worker_processes()
    raise interrupts.raising(Terminated())


def _pass_on_to_worker_processes() -> None:
    """A terminal's Ctrl-C reaches the whole process group; a SIGTERM sent to this process
    does not reach its `--jobs` workers, which would finish their files before the pool
    could stop. They get the Ctrl-C they are made to answer (kvscribe.batch.worker_process)."""
    multiprocessing = sys.modules.get("multiprocessing")
    if multiprocessing is None:  # never imported: no worker processes
        return
    for child in multiprocessing.active_children():
        with contextlib.suppress(OSError):  # gone already
            os.kill(child.pid, signal.SIGINT)
