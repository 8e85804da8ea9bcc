"""Reaching a Ray cluster for `--cluster`: the optional import, the address, token
authentication, and a one-line error for each way it can fail.

`auto`: RAY_ADDRESS when set, else a Ray already running on this machine, else a local
Ray started for this run (and stopped after it). `ray://HOST:PORT` goes through the Ray
Client port of a head node; `HOST:PORT` joins the cluster as a driver (its GCS port).
Ray reads the token of a cluster with token authentication from RAY_AUTH_TOKEN,
RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token, as its own CLI does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from types import ModuleType

from kvscribe.errors import BackendUnavailableError, UsageError

INSTALL = "pip install 'kvscribe[ray]'"
_ADDRESS = re.compile(r"^(ray://)?(?P<host>\[[0-9a-fA-F:]+\]|[^:/\s]+):(?P<port>\d{1,5})$")
REACH_SECONDS = 5.0  # a host:port that does not answer this fast is reported, not waited on

_log = logging.getLogger(__name__)


def import_ray() -> ModuleType:
    """Ray, or a one-line error naming the extra that installs it."""
    try:
        import ray
    except ImportError:
        raise BackendUnavailableError(
            "Ray is not installed",
            subject="--cluster",
            hint=f"{INSTALL}, or leave --cluster out to run on this machine (--jobs N)",
        ) from None
    return ray


def check_address(address: str) -> None:
    """`auto`, `ray://HOST:PORT` or `HOST:PORT`, else a UsageError."""
    if address != "auto" and _ADDRESS.match(address) is None:
        raise UsageError(
            f"{address!r} is no cluster address",
            subject="--cluster",
            hint="use auto, ray://HOST:PORT (Ray Client, port 10001) or HOST:PORT (GCS, 6379)",
        )


def connect(address: str) -> ModuleType:
    """Connect this process to the cluster as its driver; returns the `ray` module."""
    check_address(address)
    ray = import_ray()
    if address == "auto" and os.environ.get("RAY_ADDRESS"):
        address = os.environ["RAY_ADDRESS"]
        check_address(address)
    if address != "auto":
        check_reachable(address)
        _init(ray, address, address)
    elif not _join_local(ray):
        _init(ray, None, "a local Ray started for this run", include_dashboard=False)
    _silence_error_printer(ray)
    return ray


def _join_local(ray: ModuleType) -> bool:
    """Join a Ray running on this machine; False when there is none."""
    try:
        _init(ray, "auto", "the Ray running on this machine")
    except _NoCluster:
        return False
    return True


class _NoCluster(Exception):
    pass


def _init(ray: ModuleType, address: str | None, what: str, **kwargs) -> None:
    try:
        with _own_sigterm_handler():
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False, **kwargs)
    except ray.exceptions.AuthenticationError:
        raise BackendUnavailableError(
            f"{what} refused this driver's token",
            subject="--cluster",
            hint="set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) to the cluster's token "
            "(`ray get-auth-token` on its head node)",
        ) from None
    except ConnectionError as exc:
        if address == "auto":
            raise _NoCluster from None
        raise BackendUnavailableError(
            f"cannot join {what}: {first_line(exc)}",
            subject="--cluster",
            hint="check the address and that `ray status` works on the head node",
        ) from None
    except RuntimeError as exc:  # Ray's "Version mismatch: ..." between driver and cluster
        raise BackendUnavailableError(
            f"cannot join {what}: {first_line(exc)}",
            subject="--cluster",
            hint=f"every node needs the driver's Ray ({ray.__version__}) and Python "
            f"({sys.version_info.major}.{sys.version_info.minor})",
        ) from None


@contextlib.contextmanager
def _own_sigterm_handler() -> Iterator[None]:
    """`ray.init` sets a SIGTERM handler that exits at once (status 15): no summary, no
    manifest compacted. kvscribe's own (kvscribe.cli.termination) is put back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if before is not None:  # None: set from outside Python, which cannot be restored
            signal.signal(signal.SIGTERM, before)


def check_reachable(address: str) -> None:
    """Ray retries an unreachable GCS for minutes: refuse the address at once instead
    (`auto` is looked for when the run starts)."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or "auto"
        if address == "auto":
            return
        check_address(address)
    match = _ADDRESS.match(address)
    assert match is not None  # check_address passed
    host, port = match["host"].strip("[]"), int(match["port"])
    try:
        socket.create_connection((host, port), timeout=REACH_SECONDS).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise BackendUnavailableError(
            f"nothing answers at {host}:{port} ({reason})",
            subject="--cluster",
            hint="start the cluster (`ray start --head`) or fix the address; "
            "ray:// needs the head's Ray Client port (10001), HOST:PORT its GCS port (6379)",
        ) from None


def _silence_error_printer(ray: ModuleType) -> None:
    """Ray's driver prints cluster notices (a worker died, ...) on stdout, where `--json`
    events go; kvscribe reports those events itself, so Ray's text goes to the debug log.
    (Ray 2.60 has no switch for it: the printer is the module function below.)"""
    worker = getattr(getattr(ray, "_private", None), "worker", None)
    if worker is not None and hasattr(worker, "print_to_stdstream"):
        worker.print_to_stdstream = _to_debug_log


def _to_debug_log(data: dict, ignore_prefix: bool = False) -> None:
    for line in data.get("lines", ()):
        _log.debug("ray (%s): %s", data.get("pid"), line)


def first_line(exc: BaseException) -> str:
    """An exception's first line: Ray's texts run to whole remote tracebacks."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
