"""A realtime session's WebSocket from its handshake to its close: the key (a bearer header,
or a browser's subprotocol), refusals with OpenAI's error body, each client event answered
or named in an `error` event, and server events sent as the session makes them
(kvscribe.serve.realtime runs the session itself)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from kvscribe.contract import DecoderReport
from kvscribe.live.stats import LiveStats
from kvscribe.serve import keys
from kvscribe.serve.api_errors import ApiError
from kvscribe.serve.realtime import RealtimeSession
from kvscribe.serve.realtime_audio import SocketAudio
from kvscribe.serve.realtime_protocol import (
    SessionConfig,
    SessionError,
    error_event,
    new_id,
    parse,
    updated_config,
)

logger = logging.getLogger("kvscribe.serve")


async def serve_socket(websocket, server) -> None:
    """One client's WebSocket (Starlette's) from its handshake to its close; `server` is
    kvscribe.serve.app.Server."""
    if websocket.query_params.get("intent", "transcription") != "transcription":
        await websocket.close(code=1008, reason="kvscribe serves intent=transcription only")
        return
    protocol = _key_protocol(websocket, server.api_key)
    if protocol is False:
        await _refuse(websocket, server, ApiError(401, _NO_KEY, None, "invalid_api_key"))
        return
    if server.scheduler.draining:  # as /health says: a load balancer tries elsewhere
        await _refuse(websocket, server, ApiError(503, _DRAINING, None, "shutting_down"))
        return
    at_most = server.realtime_limits.open_at_once
    if not server.metrics.session_opened(at_most):  # each holds threads and audio
        message = f"realtime sessions open: {at_most}, the server's limit (--max-sessions): "
        message += "retry once one has closed"
        await _refuse(websocket, server, ApiError(429, message, None, "too_many_sessions"))
        return
    try:
        await _run_session(websocket, server, protocol)
    finally:
        server.metrics.session_closed()


async def _run_session(websocket, server, protocol: str | None) -> None:
    """The session, once the handshake may be accepted, until the client goes or the
    session ends."""
    from starlette.websockets import WebSocketDisconnect

    await websocket.accept(subprotocol=protocol)
    server.metrics.answered("/v1/realtime", 101)
    loop = asyncio.get_running_loop()
    outbox: asyncio.Queue[dict] = asyncio.Queue()

    def send(event: dict) -> None:  # from any thread
        with contextlib.suppress(RuntimeError):  # the loop has closed: the server is gone
            loop.call_soon_threadsafe(outbox.put_nowait, event)

    stats = LiveStats(
        backend=server.stats.backend,
        profile=server.stats.profile,
        model=server.model_names[0],
        source=SocketAudio.label,
        paced=True,
        device=server.stats.device,
    )

    def decoded(report: DecoderReport) -> None:
        server.metrics.held(report.kv_self_peak_bytes + report.kv_cross_bytes)

    session = RealtimeSession(
        server.scheduler, server.base_request, stats, send, server.realtime_limits, decoded
    )
    session.config = SessionConfig(beta=_beta_client(websocket))
    model = server.model_names[0]
    kind = "transcription_session.created" if session.config.beta else "session.created"
    send({"type": kind, "event_id": new_id("event"), "session": session.config.describe(model)})
    sender = asyncio.create_task(_send_all(websocket, outbox))
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text") or message.get("bytes") or b""
            await _answer(session, text, send, server)
            if session.ended is not None:  # its error is sent: the socket closes, saying why
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(outbox.join(), 2.0)
                reason = session.ended.encode()[:120].decode(errors="ignore")  # at most 123
                await websocket.close(code=1011, reason=reason)
                break
    except WebSocketDisconnect:
        pass
    finally:
        await asyncio.to_thread(session.abandon)
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender


async def _answer(session: RealtimeSession, text: str | bytes, send, server) -> None:
    """One client message handled; a mistake in it is an `error` event naming the client's
    event_id, and the session goes on."""
    event: dict = {}
    try:
        event = parse(text, session.limits.message_bytes)
        await _dispatch(session, event, send, server)
    except SessionError as exc:
        send(error_event(exc.message, exc.code, exc.param, event_id=_client_id(event)))
    except Exception as exc:  # a bug: one line in the log, not the connection dropped
        logger.error("realtime event %r failed: %s: %s", event.get("type"), type(exc).__name__, exc)
        message = f"the event could not be handled: {type(exc).__name__}"
        send(error_event(message, "server_error", kind="server_error", event_id=_client_id(event)))


def _beta_client(websocket) -> bool:
    """Whether the client speaks the beta Realtime API, which it says in a header (the
    `openai` SDK's beta client sends `OpenAI-Beta: realtime=v1`): its first event is then
    `transcription_session.created`, else the GA API's `session.created`, which a GA
    client's types know. An update in the other form switches the events to that form."""
    return "realtime=v1" in websocket.headers.get("openai-beta", "").replace(" ", "")


def _client_id(event: dict) -> str | None:
    value = event.get("event_id")
    return value if isinstance(value, str) else None


_NO_KEY = "a valid API key is required (Authorization: Bearer KEY, or the subprotocol "
_NO_KEY += "openai-insecure-api-key.KEY)"
_DRAINING = "the server is shutting down: connect to another, or again once it is back"


async def _refuse(websocket, server, error: ApiError) -> None:
    """The handshake answered with the HTTP status and OpenAI's error body where the server
    can send one (the SDK raises its typed error), else closed unaccepted (HTTP 403)."""
    from starlette.responses import JSONResponse

    server.metrics.answered("/v1/realtime", error.status)
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        response = JSONResponse(error.body(), error.status, headers=error.headers())
        await websocket.send_denial_response(response)
        return
    await websocket.close(code=1008 if error.status == 401 else 1013, reason=error.message)


async def _dispatch(session: RealtimeSession, event: dict, send, server) -> None:
    kind = event["type"]
    if kind in ("transcription_session.update", "session.update"):
        session.configure(updated_config(session.config, event, server.model_names))
        done = "transcription_session.updated" if session.config.beta else "session.updated"
        described = session.config.describe(server.model_names[0])
        send({"type": done, "event_id": new_id("event"), "session": described})
    elif kind == "input_audio_buffer.append":
        session.append(event)
    elif kind == "input_audio_buffer.commit":
        session.commit()
    elif kind == "input_audio_buffer.clear":
        session.clear()
    else:
        raise SessionError(f"unknown or unsupported event type {kind!r}", "invalid_value", "type")


async def _send_all(websocket, outbox: asyncio.Queue) -> None:
    while True:
        event = await outbox.get()
        try:
            await websocket.send_text(json.dumps(event))
        finally:
            outbox.task_done()


def _key_protocol(websocket, key: str | None) -> str | bool | None:
    """The subprotocol to accept, None for none, or False: no valid key. A browser gives
    the key as a subprotocol (`openai-insecure-api-key.KEY`, beside `realtime`, as OpenAI's
    browsers send it), and refuses a handshake that accepts none of those it offered: the
    one with the key, else `realtime`, is chosen, whether or not a key is needed."""
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",")]
    with_key = None
    for protocol in offered:
        name, _, value = protocol.partition("openai-insecure-api-key.")
        if not name and value and (key is None or keys.matches(value, key)):
            with_key = protocol
    bearer = websocket.headers.get("authorization", "")
    if key is not None and with_key is None and not keys.bearer_matches(bearer, key):
        return False
    if with_key is not None:
        return with_key
    return "realtime" if "realtime" in offered else None
