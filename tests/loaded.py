"""Backends loaded once per test run and shared by every test that only reads them.

Loading the transformers backend (weights, policy decoder) costs seconds; a test run
used to load the same configuration in many modules. A backend is keyed by what shapes
it (backend, profile, model, profile fields changed) and kept for the whole run: tests
transcribe with it, as a batch run transcribes many files with one backend, and must not
change it. A test that changes a backend's state loads its own.
"""

from __future__ import annotations

import dataclasses
import functools


@functools.cache
def backend(name: str, profile_name: str = "cpu-laptop", model: str | None = None, **changes):
    """The backend `name` on the CPU with `profile_name` (fields in `changes` replaced),
    loaded on first use and shared from then on."""
    return fresh(name, profile_name, model, **changes)


def fresh(name: str, profile_name: str = "cpu-laptop", model: str | None = None, **changes):
    """A backend of the test's own (for changes that are not hashable, or state it alters)."""
    from kvscribe import models, profile, registry

    backend_cls = registry.get(name)
    chosen = dataclasses.replace(profile.load(profile_name), device="cpu", **changes)
    resolved = models.resolve(model, backend_cls.capabilities.model_formats)
    loaded = backend_cls(resolved, chosen, "cpu")
    loaded.load()
    return loaded
