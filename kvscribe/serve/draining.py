"""uvicorn with kvscribe's way to stop: the first Ctrl-C (or SIGTERM) drains the scheduler,
a second Ctrl-C stops at once."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import threading
from collections.abc import Callable

import uvicorn

from kvscribe.serve.scheduler import Scheduler

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class DrainingServer(uvicorn.Server):
    """uvicorn, whose SIGTERM (or Ctrl-C) first drains the scheduler: new requests are
    answered 503 while the queued and running ones finish, then the server stops. A second
    Ctrl-C meanwhile calls `stop_now(requests still in flight)`, which ends the process
    (uvicorn's own second Ctrl-C cancelled its tasks mid-request and printed their
    tracebacks, and still waited for the lanes' decodes)."""

    DRAIN_SECONDS = 600.0

    def __init__(
        self, config: uvicorn.Config, scheduler: Scheduler, stop_now: Callable[[int], None]
    ):
        super().__init__(config)
        self.scheduler = scheduler
        self._stop_now = stop_now

    def handle_exit(self, sig, frame) -> None:
        scheduler = self.scheduler
        in_flight = scheduler.queue_depth + scheduler.running + scheduler.rows_in_flight
        if scheduler.draining and sig == signal.SIGINT:
            self._stop_now(in_flight)
            return
        scheduler.begin_draining()
        if in_flight:
            print(
                f"kvscribe serve: finishing {in_flight} request(s) in flight "
                "(Ctrl-C again to stop at once)",
                file=sys.stderr,
                flush=True,
            )
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self):
        """uvicorn's, without raising the signal again once the server has stopped: the
        command ends itself, exit 0, after removing its upload folder."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets=None) -> None:
        await asyncio.to_thread(self.scheduler.drain, self.DRAIN_SECONDS)
        await super().shutdown(sockets)
