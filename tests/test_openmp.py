"""The command's OpenMP threads wait asleep (kvscribe/machine/openmp.py), unless the user set
OMP_WAIT_POLICY: checked in the environment its engines and children start with."""

from __future__ import annotations

import os
import subprocess
import sys

_REPORT = "import os, kvscribe.cli; print(os.environ.get('OMP_WAIT_POLICY'))"


def _policy_seen(environment: dict) -> str:
    """What the command's process, and so its engines and children, hold once kvscribe.cli
    has loaded (before any engine does)."""
    done = subprocess.run(
        [sys.executable, "-c", _REPORT], capture_output=True, text=True, env=environment
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_command_makes_waiting_threads_sleep():
    environment = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _policy_seen(environment) == "PASSIVE"


def test_a_policy_the_user_set_is_kept():
    assert _policy_seen(dict(os.environ) | {"OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"
