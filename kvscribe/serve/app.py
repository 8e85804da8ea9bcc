"""The routes: OpenAI's audio API (`/v1/audio/transcriptions`, `/v1/audio/translations`,
`/v1/models`), `/health` and `/metrics`, over one Scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import signal
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route, WebSocketRoute

from kvscribe.contract import DecodeRequest
from kvscribe.decoding import temperatures_from
from kvscribe.serve import keys, responses
from kvscribe.serve.api_errors import ApiError
from kvscribe.serve.body import RequestBody
from kvscribe.serve.forms import MAX_FIELDS, TranscriptionAsk, decoded_audio, read_ask, spool
from kvscribe.serve.metrics import Metrics
from kvscribe.serve.realtime import SessionLimits, serve_socket
from kvscribe.serve.scheduler import Decoded, Failed, Finished, Job, Scheduler, Started
from kvscribe.stats import FileStats, RunStats
from kvscribe.types import Transcript

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
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
        if name not in server.model_names:
            raise ApiError(404, f"model {name!r} is not loaded here", "model", "model_not_found")
        return JSONResponse(_model(name))

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "queue_depth": server.scheduler.queue_depth})

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
        assert isinstance(exc, ApiError)
        server.metrics.answered(request.url.path, exc.status)
        return JSONResponse(exc.body(), exc.status, headers=exc.headers())

    routes = [
        Route("/", page),
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        Route("/v1/audio/translations", translations, methods=["POST"]),
        Route("/v1/models", models),
        Route("/v1/models/{name:path}", model),
        Route("/health", health),
        Route("/metrics", metrics),
        WebSocketRoute("/v1/realtime", realtime),
    ]
    app = Starlette(routes=routes, exception_handlers={ApiError: api_error})
    return RequestBody(app, server.limits.body_bytes)


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

    try:
        form = await asyncio.wait_for(
            request.form(max_files=1, max_fields=MAX_FIELDS), server.limits.upload_seconds
        )
    except (MultiPartException, HTTPException) as exc:  # Starlette re-raises the first so
        detail = getattr(exc, "message", None) or getattr(exc, "detail", "")
        raise ApiError(400, f"malformed multipart body: {detail}", None, "invalid_body") from None
    except TimeoutError:
        raise ApiError(
            408, f"the upload took over {server.limits.upload_seconds:g} s", None, "upload_timeout"
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


class DrainingServer(uvicorn.Server):
    """uvicorn, whose SIGTERM (or Ctrl-C) first drains the scheduler: new requests are
    answered 503 while the queued and running ones finish, then the server stops."""

    DRAIN_SECONDS = 600.0

    def __init__(self, config: uvicorn.Config, scheduler: Scheduler):
        super().__init__(config)
        self.scheduler = scheduler

    def handle_exit(self, sig, frame) -> None:
        self.scheduler.begin_draining()
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
