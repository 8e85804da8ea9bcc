"""Which device a backend runs on: one rule for `kvscribe FILE`, `kvscribe mic --live` and
`kvscribe bench`.

A device the user named (--device cpu|cuda|mps) is a demand: a backend that cannot run
there is a usage error. A device that came from a profile, or from `auto`, is a
preference: a backend that cannot run there runs where it can, and the run says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvscribe import profile as profiles
from kvscribe.errors import BackendUnavailableError, UsageError
from kvscribe.machine import hardware

# The first of these a backend supports is where it runs when the preferred device is not
# one of its own (every built-in backend runs on the CPU).
FALLBACK_ORDER = ("cpu", "cuda", "mps")


@dataclass(frozen=True)
class DeviceChoice:
    device: str
    note: str | None = None  # why the backend runs elsewhere than preferred, for the stats


def device_for(
    backend: str,
    supported: tuple[str, ...],
    profile: profiles.Profile,
    requested: str | None,
    found: hardware.Hardware,
) -> DeviceChoice:
    """Where `backend` (which can run on `supported`) runs: --device (`requested`) when given,
    else the profile's device; `auto` means CUDA when present (profile.pick_device).

    Raises UsageError when the user named a device the backend cannot run on.
    """
    wanted = profiles.pick_device(profile, requested, found)
    if wanted in supported:
        return DeviceChoice(wanted)
    if requested not in (None, "auto"):
        raise UsageError(
            f"backend {backend} cannot run on {wanted}",
            subject="--device",
            hint=f"use one of: {', '.join(supported)}",
        )
    fallback = next((d for d in FALLBACK_ORDER if d in supported), supported[0])
    where = " / ".join(d.upper() for d in supported)
    asked_by = f"profile {profile.name}" if requested is None else f"--device {requested}"
    note = f"device: {fallback} ({backend} runs on {where} only; {asked_by} asked {wanted})"
    return DeviceChoice(fallback, note)


def require_cuda(found: hardware.Hardware, subject: str = "--device") -> None:
    """For a command that was told to use CUDA up front: one line, exit 6, when there is none."""
    if not found.has_cuda:
        raise BackendUnavailableError(
            "no CUDA device found", subject=subject, hint="use --device cpu or --device auto"
        )
