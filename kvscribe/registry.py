"""Backend discovery through the `kvscribe.backends` entry-point group.

Built-ins are registered in pyproject.toml exactly as a plugin would be. A
plugin that fails to import is reported by `kvscribe backends` and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.metadata import entry_points

from kvscribe.errors import BackendUnavailableError, UsageError

GROUP = "kvscribe.backends"
DEFAULT_BACKEND = "ctranslate2"


@dataclass(frozen=True)
class BackendEntry:
    name: str
    target: str  # "module:Class", as registered
    backend: type | None
    load_error: str | None


@cache
def _registered_entry_points() -> tuple:
    """The group's entry points, read once a process: each read scans every installed
    distribution's metadata (7-10 ms in a venv of 140), and a transcription asked four
    times. What is installed does not change under a running command."""
    return tuple(entry_points(group=GROUP))


def discover() -> dict[str, BackendEntry]:
    """Every registered backend, loaded or with the reason it would not load."""
    found = {ep.name: _loaded(ep) for ep in _registered_entry_points()}
    return dict(sorted(found.items()))


def _loaded(ep) -> BackendEntry:
    try:
        return BackendEntry(ep.name, ep.value, ep.load(), None)
    except Exception as exc:  # a broken plugin is reported, never fatal to the others
        return BackendEntry(ep.name, ep.value, None, f"{type(exc).__name__}: {exc}")


def names() -> list[str]:
    """Every registered backend's name, none of them imported (shell completion)."""
    return sorted({ep.name for ep in _registered_entry_points()})


def registered(name: str):
    """The entry point registering backend `name`, loaded or not; a UsageError for a name
    no backend has."""
    entries = {ep.name: ep for ep in _registered_entry_points()}
    if name not in entries:
        raise UsageError(
            "unknown backend",
            subject=name,
            hint=f"choose one of: {', '.join(sorted(entries))} (`kvscribe backends`)",
        )
    return entries[name]


def imported(name: str) -> type:
    """The backend class for `name`, its module imported but the engine it needs not yet
    (get checks that): its capabilities, read before the engine's own imports."""
    entry = _loaded(registered(name))
    if entry.backend is None:
        raise BackendUnavailableError(
            f"plugin failed to load ({entry.load_error})",
            subject=name,
            hint="reinstall it or pick another --backend",
        )
    return entry.backend


def get(name: str) -> type:
    """The backend class for `name`, checked to be available on this machine. Only that
    backend's module is imported: a run does not pay for the others' (the whisper.cpp
    backend's modules alone took ~60 ms of a ctranslate2 run's start)."""
    backend = imported(name)
    reason = backend.check_available()
    if reason:
        raise BackendUnavailableError(reason, subject=name, hint="`kvscribe backends` says more")
    return backend
