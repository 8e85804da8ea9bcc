"""`kvscribe serve`: the OpenAI audio API over one loaded model (docs/server.md)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import typer

from kvscribe.cli import shared_options as shared
from kvscribe.cli.parameters import ParameterTable, option_values, takes
from kvscribe.cli.render import exit_with, setup_logging, stderr_console
from kvscribe.errors import BackendUnavailableError, ExitCode, UsageError
from kvscribe.serve.kv_ledger import describe_budget
from kvscribe.serve.options import ServeOptions

_SERVER = "Server"
# Each flag's default is its ServeOptions field's, declared once there.
_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ServeOptions)}
_ENGINE = tuple(option for option in shared.ENGINE if option is not shared.TASK)

PARAMETERS: ParameterTable = {
    **shared.parameters(_ENGINE),
    "host": (
        str,
        typer.Option(
            _DEFAULTS["host"],
            "--host",
            help="Address to listen on; any but a loopback one needs an API key.",
            rich_help_panel=_SERVER,
        ),
    ),
    "port": (
        int,
        typer.Option(
            _DEFAULTS["port"],
            "--port",
            help="Port to listen on (0: a free one, printed).",
            rich_help_panel=_SERVER,
        ),
    ),
    "api_key_file": (
        Path,
        typer.Option(
            None,
            "--api-key-file",
            dir_okay=False,
            help="File holding the key clients must send (Authorization: Bearer KEY); "
            "else the KVSCRIBE_API_KEY environment variable; neither: no key (loopback only).",
            rich_help_panel=_SERVER,
        ),
    ),
    "max_body_mb": (
        float,
        typer.Option(
            _DEFAULTS["max_body_mb"],
            "--max-body-mb",
            help="Largest upload, MiB (OpenAI's: 25).",
            rich_help_panel=_SERVER,
        ),
    ),
    "max_audio_minutes": (
        float,
        typer.Option(
            _DEFAULTS["max_audio_minutes"],
            "--max-audio-minutes",
            help="Longest audio a request may hold (checked while it is decoded).",
            rich_help_panel=_SERVER,
        ),
    ),
    "lanes": (
        int,
        typer.Option(
            None,
            "--lanes",
            show_default="a single-threaded engine per core on a CPU, as many as fit in "
            "memory, at most 4 (backends with worker_per_core); else 1",
            help="Engines loaded, each on a thread of its own; the last one is kept for "
            "requests of 30 s or less.",
            rich_help_panel=_SERVER,
        ),
    ),
    "max_queue": (
        int,
        typer.Option(
            _DEFAULTS["max_queue"],
            "--max-queue",
            help="Requests that may wait to start; more are answered 429 with Retry-After.",
            rich_help_panel=_SERVER,
        ),
    ),
    "max_sessions": (
        int,
        typer.Option(
            None,
            "--max-sessions",
            show_default="--max-queue's value",
            help="Realtime sessions open at once; more are answered 429.",
            rich_help_panel=_SERVER,
        ),
    ),
    "upload_timeout": (
        float,
        typer.Option(
            _DEFAULTS["upload_timeout"],
            "--upload-timeout",
            help="Seconds an upload may take to arrive.",
            rich_help_panel=_SERVER,
        ),
    ),
    "kv_budget_mb": (
        float,
        typer.Option(
            None,
            "--kv-budget-mb",
            show_default="the profile's kv_budget_mb for the backend, else none",
            help="Decoder KV cache bytes (MB = 10^6 bytes) the requests in flight may "
            "reserve together, each row its chunk's measured (or estimated) bytes at the "
            "profile's cache policy; work that does not fit waits. It sets the concurrency.",
            rich_help_panel=_SERVER,
        ),
    ),
    **shared.parameters(shared.DECODING),
    **shared.parameters((shared.QUIET, shared.DEBUG)),
}


@takes(PARAMETERS)
def serve(**given: Any) -> None:
    """Serve OpenAI's audio API: transcriptions, translations, realtime sessions.

    One model is loaded; requests of 30 s or less share decoder batches,
    longer ones are decoded a piece at a time, in turn.
    Realtime transcription sessions connect over a WebSocket (/v1/realtime).
    Call it with the openai client (base_url http://127.0.0.1:PORT/v1) or curl,
    or open http://127.0.0.1:PORT/ in a browser: a page to try it.
    Needs pip install 'kvscribe\\[serve]'.
    """
    console = stderr_console()
    setup_logging(given["debug"])

    def body() -> int:
        options = ServeOptions(**option_values(given, ServeOptions))
        return _run(options, console)

    exit_with(body, console, given["debug"])


def _stopper(spool_dir: Path):
    """A second Ctrl-C while draining: remove the upload folder, say what was not answered,
    and end the process at once (exit 130, as an interrupted command)."""

    def stop_now(in_flight: int) -> None:
        shutil.rmtree(spool_dir, ignore_errors=True)
        print(
            f"kvscribe serve: stopped at once; {in_flight} request(s) in flight not answered",
            file=sys.stderr,
            flush=True,
        )
        os._exit(ExitCode.INTERRUPTED)

    return stop_now


def _run(options, console) -> int:
    try:
        import uvicorn

        from kvscribe.serve.app import Limits, Server, create_app
        from kvscribe.serve.draining import DrainingServer
        from kvscribe.serve.realtime import SessionLimits
    except ImportError as exc:
        raise BackendUnavailableError(
            f"{exc.name} is not installed",
            subject="kvscribe serve",
            hint="pip install 'kvscribe[serve]'",
        ) from None
    from kvscribe.runner import decode_request
    from kvscribe.serve import keys
    from kvscribe.serve.scheduler import QueueLimits, Scheduler

    key = options.api_key()
    listener = _listen(options.host, options.port)
    backends, stats = _load_lanes(options)
    base_request = decode_request(options)
    kv = _kv_ledger(options, backends[0], base_request)
    scheduler = Scheduler(backends, QueueLimits(requests=options.max_queue), kv)
    spool_dir = Path(tempfile.mkdtemp(prefix="kvscribe-serve-"))  # mode 0700
    server = Server(
        scheduler=scheduler,
        model_names=(backends[0].model.name,),
        base_request=base_request,
        increment=options.temperature_increment_on_fallback,
        stats=stats,
        spool_dir=spool_dir,
        limits=Limits(
            body_bytes=int(options.max_body_mb * 1024 * 1024),
            audio_seconds=options.max_audio_minutes * 60,
            upload_seconds=options.upload_timeout,
        ),
        api_key=key,
        realtime_limits=SessionLimits(open_at_once=options.sessions_at_once()),
    )
    host, port = listener.getsockname()[:2]
    print(f"kvscribe serve: listening on http://{host}:{port}", flush=True)
    if not options.quiet:
        console.print(
            f"model {backends[0].model.name}, backend {stats.backend}, profile "
            f"{stats.profile}, device {stats.device}, {len(backends)} lane(s); API key: "
            f"{'required' if key else 'none (loopback only)'}; {describe_budget(kv)}"
        )
    if key and not keys.browser_can_send(key) and not options.quiet:
        console.print(
            "[yellow]kvscribe: warning:[/] a browser cannot send this API key on a WebSocket "
            "(only letters, digits and !#$%&'*+-.^_`|~): the page at / cannot record; "
            "clients that send it in a header can"
        )
    config = uvicorn.Config(
        create_app(server),
        log_level="warning",
        access_log=False,
        # Past this a message closes the socket (1009); past message_bytes it gets an error.
        ws_max_size=4 * server.realtime_limits.message_bytes,
    )
    try:
        DrainingServer(config, scheduler, _stopper(spool_dir)).run(sockets=[listener])
    finally:
        scheduler.stop()
        shutil.rmtree(spool_dir, ignore_errors=True)
    return ExitCode.OK


def _kv_ledger(options, backend, request):
    """The server's KV budget: --kv-budget-mb, else the profile's kv_budget_mb for the
    backend; a row's bytes from the backend (measured once, or estimated)."""
    from kvscribe.serve.kv_ledger import KvLedger, RowCost

    budget_mb = options.kv_budget_mb
    if budget_mb is None:
        budget_mb = backend.profile.settings_for(backend.name).get("kv_budget_mb")
    row = backend.kv_row_bytes(request)
    cost = None if row is None else RowCost(*row)
    return KvLedger(None if budget_mb is None else int(budget_mb * 1_000_000), cost)


def _load_lanes(options) -> tuple[list, object]:
    """The lanes' backends, each loaded with its own engine, and the first one's stats. On a
    CPU with more than one lane (and no --threads), each engine runs single-threaded."""
    from kvscribe.runner import load_backend

    lanes = options.lanes or _auto_lanes(options)
    if lanes > 1 and options.threads is None:
        options = dataclasses.replace(options, threads=1)
    first, stats = load_backend(options)
    if stats.device != "cpu":
        return [first], stats  # one engine owns an accelerator
    return [first, *(load_backend(options)[0] for _ in range(lanes - 1))], stats


def _auto_lanes(options) -> int:
    """A lane per core on a CPU, as a batch folder starts a worker per core."""
    from kvscribe import models, registry
    from kvscribe.machine import capacity

    if options.device not in (None, "auto", "cpu") or options.threads is not None:
        return 1
    backend_cls = registry.get(options.backend)
    size = models.resolve(options.model, backend_cls.capabilities.model_formats).size_bytes()
    return capacity.default_jobs(size, backend_cls.capabilities.worker_per_core)


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before the model loads, so a taken port fails at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror}",
            subject="--port",
            hint="pick another port, or --port 0 for a free one",
        ) from None
    listener.listen(128)
    return listener
