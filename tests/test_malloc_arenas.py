"""The command's processes use at most two glibc malloc arenas (kvscribe/machine/malloc_arenas.py),
unless the user set MALLOC_ARENA_MAX."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kvscribe.machine import malloc_arenas

_REPORT = "import os, kvscribe.cli; print(os.environ.get('MALLOC_ARENA_MAX'))"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")


def _arenas_seen(environment: dict) -> str:
    """What the command's process, and so its children, hold after kvscribe.cli loads."""
    done = subprocess.run(
        [sys.executable, "-c", _REPORT], capture_output=True, text=True, env=environment
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_command_limits_the_arenas_for_itself_and_its_children(monkeypatch):
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert _arenas_seen(dict(os.environ)) == str(malloc_arenas.ARENAS)


def test_a_limit_the_user_set_is_kept(monkeypatch):
    environment = dict(os.environ) | {"MALLOC_ARENA_MAX": "6"}
    assert _arenas_seen(environment) == "6"
    monkeypatch.setenv("MALLOC_ARENA_MAX", "6")
    malloc_arenas.limit()
    assert os.environ["MALLOC_ARENA_MAX"] == "6"
