"""Where kvscribe keeps things: platformdirs' user dirs, overridable for tests and CI."""

from __future__ import annotations

import os
from pathlib import Path

from kvscribe.errors import ModelNotFoundError


def cache_dir() -> Path:
    """Converted/joined models and built tools (KVSCRIBE_CACHE_DIR overrides)."""
    override = os.environ.get("KVSCRIBE_CACHE_DIR")
    if override:
        return Path(override)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("kvscribe"))


def cache_unwritable(exc: OSError, what: str) -> ModelNotFoundError:
    """The cache could not take `what` (read-only, full, a file in the way): where, and
    the way out."""
    return ModelNotFoundError(
        f"cannot write {what} into the cache: {exc.strerror or exc}",
        subject=str(cache_dir()),
        hint="free some space, or set KVSCRIBE_CACHE_DIR to a folder you can write in",
    )


def config_dir() -> Path:
    """User profiles live in `<config>/profiles/*.toml` (KVSCRIBE_CONFIG_DIR overrides)."""
    override = os.environ.get("KVSCRIBE_CONFIG_DIR")
    if override:
        return Path(override)
    from platformdirs import user_config_dir

    return Path(user_config_dir("kvscribe"))
