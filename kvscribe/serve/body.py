"""The request body's guard: 413 for a body over the limit, and no answer sent while the
client is still uploading.

An answer sent before the body is read (401 for a wrong key, 413 for a declared length
over the limit, 400 for a bad field) is followed by uvicorn closing the connection; the
unread upload left in the socket makes the kernel reset it, and a reset discards the
answer on the client's side before the client reads it: the `openai` SDK raised
APIConnectionError instead of its typed error, about one time in ten. So the rest of the
body is read and dropped before the answer starts, as far as a bound (web servers call
this a lingering close); past the bound, or for a declared length beyond it, the answer is
sent at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from starlette.responses import JSONResponse

from kvscribe.serve.api_errors import ApiError

# How much of an unread body is dropped, at most, before answering.
DISCARD_BYTES = 64 * 1024 * 1024
DISCARD_SECONDS = 10.0


@dataclass
class _Received:
    """What the app has read of the request body so far."""

    bytes: int = 0
    complete: bool = False  # the last part read, or the client gone

    def count(self, message: dict) -> None:
        if message["type"] != "http.request":
            self.complete = True
            return
        self.bytes += len(message.get("body", b""))
        if not message.get("more_body", False):
            self.complete = True


class RequestBody:
    """ASGI middleware: 413 for a body over `limit` bytes (at once where its length is
    declared, else as soon as the bytes read pass it, raised from `receive` into the form
    parser), and the unread rest of a body dropped before any answer starts."""

    def __init__(self, app, limit: int, refused: Callable[[dict, int], None] | None = None):
        """`refused(scope, status)`: told of each request refused here, before the app."""
        self.app = app
        self.limit = limit
        self.refused = refused

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        received = _Received()

        async def limited() -> dict:
            message = await receive()
            received.count(message)
            if received.bytes > self.limit:
                raise self._too_large()
            return message

        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        length = int(declared) if declared is not None and declared.isdigit() else None
        # A client that asked for "100 Continue" sends nothing until told to (by a receive).
        waits = headers.get(b"expect", b"").lower() == b"100-continue"

        async def answer(message: dict) -> None:
            if message["type"] == "http.response.start" and not received.complete:
                hopeless = length is not None and length - received.bytes > DISCARD_BYTES
                stalled = message["status"] == 408  # its rest would not come either
                if not (hopeless or stalled or (waits and received.bytes == 0)):
                    await _drop_rest(receive, received)
            await send(message)

        if length is not None and length > self.limit:
            error = self._too_large()
            if self.refused is not None:
                self.refused(scope, error.status)
            response = JSONResponse(error.body(), 413, headers={"Connection": "close"})
            await response(scope, receive, answer)
            return
        await self.app(scope, limited, answer)

    def _too_large(self) -> ApiError:
        mib = self.limit / (1024 * 1024)
        return ApiError(
            413,
            f"the request body is over this server's limit of {mib:g} MiB (kvscribe serve "
            "--max-body-mb); send a compressed file (mp3, opus) or a shorter recording",
            "file",
            "body_too_large",
        )


async def _drop_rest(receive, received: _Received) -> None:
    """Read and drop the body's unread parts, within DISCARD_BYTES and DISCARD_SECONDS."""
    budget = received.bytes + DISCARD_BYTES
    deadline = time.monotonic() + DISCARD_SECONDS
    while not received.complete and received.bytes <= budget:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return
        received.count(message)
