"""Backend discovery through the `kvscribe.backends` entry-point group.

Built-ins are registered in pyproject.toml exactly as a plugin would be. A
plugin that fails to import is reported by `kvscribe backends` and skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
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


def discover() -> dict[str, BackendEntry]:
    """Every registered backend, loaded or with the reason it would not load."""
    found = {}
    for ep in entry_points(group=GROUP):
        try:
            found[ep.name] = BackendEntry(ep.name, ep.value, ep.load(), None)
        except Exception as exc:
            found[ep.name] = BackendEntry(ep.name, ep.value, None, f"{type(exc).__name__}: {exc}")
    return dict(sorted(found.items()))


def get(name: str) -> type:
    """The backend class for `name`, checked to be available on this machine."""
    entries = discover()
    entry = entries.get(name)
    if entry is None:
        raise UsageError(
            "unknown backend",
            subject=name,
            hint=f"choose one of: {', '.join(entries)} (`kvscribe backends`)",
        )
    if entry.backend is None:
        raise BackendUnavailableError(
            f"plugin failed to load ({entry.load_error})",
            subject=name,
            hint="reinstall it or pick another --backend",
        )
    reason = entry.backend.check_available()
    if reason:
        raise BackendUnavailableError(reason, subject=name, hint="`kvscribe backends` says more")
    return entry.backend
