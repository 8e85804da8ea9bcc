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

from kvscribe.errors import ExitCode, Terminated


@contextlib.contextmanager
def sigterm_stops_like_ctrl_c() -> Iterator[None]:
    """While inside (the main thread only: no other may set a handler), SIGTERM raises
    `Terminated`; the handler before is restored after (a caller in the same process).
    An exit it caused, which typer turns into exit 130 as for Ctrl-C, says so in one line
    and exits 143."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except (SystemExit, KeyboardInterrupt) as stopped:
        if not _caused_by_sigterm(stopped):
            raise
        sys.stderr.write("kvscribe: stopped by SIGTERM\n")
        raise SystemExit(ExitCode.TERMINATED) from None
    finally:
        signal.signal(signal.SIGTERM, before)


def _caused_by_sigterm(error: BaseException | None) -> bool:
    seen = 0
    while error is not None and seen < 10:  # typer's Exit(130) from the interrupt
        if isinstance(error, Terminated):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def _terminate(number, frame) -> None:
    _pass_on_to_worker_processes()
    raise Terminated


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
