"""The routes: OpenAI's audio API (`/v1/audio/transcriptions`, `/v1/audio/translations`,
`/v1/models`), `/health` and `/metrics`, over one Scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Match, Route, WebSocketRoute

from kvscribe.contract import DecodeRequest
from kvscribe.decoding import temperatures_from
from kvscribe.serve import keys, responses
from kvscribe.serve.api_errors import ApiError, no_route
from kvscribe.serve.body import RequestBody
from kvscribe.serve.forms import (
    MAX_FIELDS,
    TranscriptionAsk,
    check_model,
    decoded_audio,
    read_ask,
    spool,
)
from kvscribe.serve.metrics import Metrics
from kvscribe.serve.realtime import SessionLimits
from kvscribe.serve.realtime_socket import serve_socket
from kvscribe.serve.scheduler import Decoded, Failed, Finished, Job, Scheduler, Started
from kvscribe.stats import FileStats, RunStats
from kvscribe.types import Transcript

# A client that has gone is noticed within this many seconds while its request waits.
DISCONNECT_POLL_SECONDS = 0.25


@dataclass(frozen=True)
class Limits:
    """The upload's limits, from the command's options (kvscribe.serve.options)."""

    body_bytes: int
    audio_seconds: float  # decoded audio, checked while decoding
    upload_seconds: float  # the whole upload must arrive within this


@dataclass(frozen=True)
class Server:
    """What the routes need: the scheduler, and what the server was started with."""

    scheduler: Scheduler
    model_names: tuple[str, ...]  # the loaded model, as `kvscribe models` names it
    base_request: DecodeRequest  # the server's decoding options; a request changes a few
    increment: float  # --temperature-increment-on-fallback
    stats: RunStats  # the loaded engine's figures (settings, load time)
    spool_dir: Path
    limits: Limits
    api_key: str | None = None
    metrics: Metrics = dataclasses.field(default_factory=Metrics)
    realtime_limits: SessionLimits = dataclasses.field(default_factory=SessionLimits)


def create_app(server: Server) -> Starlette:
    # The multipart parser warns of a malformed body with the body's bytes; the client
    # gets its 400, and the server logs no request's content.
    logging.getLogger("python_multipart").setLevel(logging.ERROR)

    async def transcriptions(request: Request) -> Response:
        return await _audio(server, request, "transcribe")

    async def translations(request: Request) -> Response:
        return await _audio(server, request, "translate")

    async def models(request: Request) -> Response:
        _check_key(server, request)
        data = [_model(name) for name in server.model_names]
        return JSONResponse({"object": "list", "data": data})

    async def model(request: Request) -> Response:
        _check_key(server, request)
        name = request.path_params["name"]
        check_model(name, server.model_names)
        return JSONResponse(_model(name))

    async def health(request: Request) -> Response:
        # Draining: 503, so a load balancer sends the next requests elsewhere.
        draining = server.scheduler.draining
        status = {"status": "draining" if draining else "ok"}
        body = {**status, "queue_depth": server.scheduler.queue_depth}
        # what a refused realtime handshake was (a browser cannot read its status)
        body["realtime_sessions"] = server.metrics.sessions
        body["realtime_sessions_max"] = server.realtime_limits.open_at_once
        return JSONResponse(body, 503 if draining else 200)

    async def metrics(request: Request) -> Response:
        _check_key(server, request)
        scheduler = server.scheduler
        text = server.metrics.text(
            scheduler.queue_depth,
            scheduler.running,
            scheduler.rows_in_flight,
            scheduler.audio_seconds_decoded,
            scheduler.kv,
        )
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def page(request: Request) -> Response:
        # The page itself holds nothing secret: what it shows, it fetches with the key.
        return HTMLResponse(_page())

    async def realtime(websocket) -> None:
        await serve_socket(websocket, server)

    async def api_error(request: Request, exc: Exception) -> Response:
        if not isinstance(exc, ApiError):  # Starlette's own: no route, or not this method
            exc = no_route(request.method, request.url.path, exc.status_code, exc.headers)
        server.metrics.answered(route_of(request.scope), exc.status)
        return JSONResponse(exc.body(), exc.status, headers=exc.headers())

    def counted(handler):
        """A route whose answers `/metrics` counts (its errors are counted in api_error;
        the audio routes count their own, with their latency)."""

        async def answer(request: Request) -> Response:
            response = await handler(request)
            server.metrics.answered(route_of(request.scope), response.status_code)
            return response

        return answer

    routes = [
        Route("/", counted(page)),
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", translations, methods=["POST"]),
        Route("/v1/models", counted(models)),
        Route("/v1/models/{name:path}", counted(model)),
        Route("/health", counted(health)),
        Route("/metrics", counted(metrics)),
        WebSocketRoute("/v1/realtime", realtime),
    ]

    def route_of(scope) -> str:
        """The route a request is counted under: its template, never the path the client
        chose (a series per model name asked for would grow without bound)."""
        return next((r.path for r in routes if r.matches(scope)[0] is not Match.NONE), "other")

    handlers = {ApiError: api_error, HTTPException: api_error}
    app = Starlette(routes=routes, exception_handlers=handlers)
    refused = lambda scope, status: server.metrics.answered(route_of(scope), status)  # noqa: E731
    return RequestBody(app, server.limits.body_bytes, refused)


@functools.cache
def _page() -> str:
    """The page at / (kvscribe/serve/page.html, package data): plain HTML and JavaScript,
    nothing fetched from elsewhere."""
    return resources.files("kvscribe.serve").joinpath("page.html").read_text(encoding="utf-8")


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "kvscribe"}


def _check_key(server: Server, request: Request) -> None:
    """Bearer key, compared in constant time; no key configured: none asked for."""
    if server.api_key is None:
        return
    if not keys.bearer_matches(request.headers.get("authorization", ""), server.api_key):
        raise ApiError(
            401, "a valid API key is required (Authorization: Bearer KEY)", None, "invalid_api_key"
        )


async def _audio(server: Server, request: Request, task: str) -> Response:
    started = time.perf_counter()
    _check_key(server, request)
    ask, path = await _upload(server, request, task)
    try:
        audio = await asyncio.to_thread(decoded_audio, path, server.limits.audio_seconds)
    finally:
        path.unlink(missing_ok=True)
    events: asyncio.Queue = asyncio.Queue()
    loop = asyncio.get_running_loop()

    def sink(event) -> None:  # on the engine thread
        with contextlib.suppress(RuntimeError):  # a closed loop: the server is gone
            loop.call_soon_threadsafe(events.put_nowait, event)

    job = Job(audio, _decode_request(server, ask), sink)
    server.scheduler.submit(job)
    if ask.stream:
        stream = _stream(server, job, events, ask, (request.url.path, started))
        return StreamingResponse(stream, media_type="text/event-stream")
    transcript, stats = await _outcome(server, job, events, request, ask)
    body = responses.body(transcript, ask.response_format, task, stats)
    server.metrics.answered(request.url.path, 200, time.perf_counter() - started)
    return Response(body, media_type=responses.MEDIA_TYPES[ask.response_format])


async def _upload(server: Server, request: Request, task: str) -> tuple[TranscriptionAsk, Path]:
    """The form read within the upload deadline, checked, and its file spooled."""
    from starlette.exceptions import HTTPException
    from starlette.formparsers import MultiPartException

    kind = request.headers.get("content-type", "")
    if not kind.startswith("multipart/form-data"):
        raise ApiError(
            400,
            f"the body must be multipart/form-data (the audio as a `file` part, the rest as "
            f"form fields), as OpenAI's clients send it; got {kind or 'no Content-Type'}",
            None,
            "invalid_content_type",
        )
    try:
        form = await asyncio.wait_for(
            request.form(max_files=1, max_fields=MAX_FIELDS), server.limits.upload_seconds
        )
    except (MultiPartException, HTTPException) as exc:  # Starlette re-raises the first so
        detail = getattr(exc, "message", None) or getattr(exc, "detail", "")
        raise ApiError(400, f"malformed multipart body: {detail}", None, "invalid_body") from None
    except TimeoutError:
        seconds = server.limits.upload_seconds
        raise ApiError(
            408,
            f"the upload took over {seconds:g} s, this server's limit (kvscribe serve "
            "--upload-timeout); send the file again over a faster link",
            "file",
            "upload_timeout",
        ) from None
    except ClientDisconnect:
        raise ApiError(400, "the client went away during the upload", None, "client_gone") from None
    try:
        ask = read_ask(form, task, server.model_names)
        return ask, await asyncio.to_thread(spool, form.get("file"), server.spool_dir)
    finally:
        await form.close()


def _decode_request(server: Server, ask: TranscriptionAsk) -> DecodeRequest:
    base = server.base_request
    fallback = dataclasses.replace(
        base.fallback, temperatures=temperatures_from(ask.temperature, server.increment)
    )
    return dataclasses.replace(
        base,
        task=ask.task,
        language=ask.language or base.language,
        prompt=ask.prompt,
        word_timestamps=ask.words,
        fallback=fallback,
    )


class _Collected:
    """A job's events gathered into its transcript and figures."""

    def __init__(self, job: Job):
        self.job = job
        self.language = "en"
        self.probability: float | None = None
        self.segments: list = []
        self.finished: Finished | None = None

    def add(self, event) -> None:
        if isinstance(event, Failed):
            raise event.error
        if isinstance(event, Started):
            self.language, self.probability = event.language, event.probability
        elif isinstance(event, Decoded):
            self.segments.append(event.segment)
        elif isinstance(event, Finished):
            self.finished = event

    def transcript(self) -> Transcript:
        return Transcript(
            "upload", self.language, self.job.seconds, self.segments, self.probability
        )

    def stats(self, server: Server) -> dict[str, Any]:
        """The run's figures, as `--stats-json` writes them for one file."""
        assert self.finished is not None
        report = self.finished.report
        base = server.stats
        run = RunStats(
            backend=base.backend,
            profile=base.profile,
            model=base.model,
            device=base.device,
            settings={**base.settings, **report.settings},
            load_seconds=base.load_seconds,
            started=self.job.submitted,
        )
        run.files.append(
            FileStats(
                "upload",
                audio_seconds=self.job.seconds,
                decode_seconds=self.finished.decode_seconds,
                first_segment_seconds=self.finished.first_segment_seconds,
                language=self.language,
                language_probability=self.probability,
                report=report,
            )
        )
        run.finish()
        return run.to_dict()


async def _outcome(server, job, events, request, ask) -> tuple[Transcript, dict | None]:
    """Wait for the job's events; a client that disconnects meanwhile cancels it."""
    collected = _Collected(job)
    try:
        while collected.finished is None:
            try:
                event = await asyncio.wait_for(events.get(), DISCONNECT_POLL_SECONDS)
            except TimeoutError:
                if await request.is_disconnected():
                    server.scheduler.cancel(job)
                    raise ApiError(400, "the client went away", None, "client_gone") from None
                continue
            collected.add(event)
    except BaseException:
        server.scheduler.cancel(job)
        raise
    report = collected.finished.report
    server.metrics.held(report.kv_self_peak_bytes + report.kv_cross_bytes)
    stats = collected.stats(server) if ask.with_stats else None
    return collected.transcript(), stats


async def _stream(server, job, events, ask, clock) -> AsyncIterator[bytes]:
    """Server-sent events as OpenAI streams a transcription: text deltas, then the whole
    text; the deltas joined are the whole text. A client that goes cancels the job."""
    route, started = clock
    collected = _Collected(job)
    sent = ""
    try:
        while collected.finished is None:
            event = await events.get()
            try:
                collected.add(event)
            except ApiError as exc:
                yield responses.sse(exc.body())
                return
            if isinstance(event, Decoded):
                so_far = "".join(s.text for s in collected.segments).strip()
                if len(so_far) > len(sent):
                    if not sent:
                        server.metrics.first_delta(time.perf_counter() - started)
                    yield responses.sse(
                        {"type": "transcript.text.delta", "delta": so_far[len(sent) :]}
                    )
                    sent = so_far
        report = collected.finished.report
        server.metrics.held(report.kv_self_peak_bytes + report.kv_cross_bytes)
        text = collected.transcript().text
        if len(text) > len(sent):
            yield responses.sse({"type": "transcript.text.delta", "delta": text[len(sent) :]})
        done: dict[str, Any] = {"type": "transcript.text.done", "text": text}
        if ask.with_stats:
            done["kvscribe"] = collected.stats(server)
        yield responses.sse(done)
        server.metrics.answered(route, 200, time.perf_counter() - started)
    finally:
        if collected.finished is None:
            server.scheduler.cancel(job)
