"""The commands beside transcribe: `--help` (fast, no engine imported), `--version`,
`backends`, `profiles`, `models` and the shell completion script."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvscribe.errors import ExitCode
from tests.conftest import KVSCRIBE, run_cli

pytestmark = [pytest.mark.model]


def test_help_is_fast_and_imports_no_engine():
    probe = (
        "import sys\nfrom kvscribe.cli import app\n"
        "try:\n    app(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'transformers', 'faster_whisper', 'ctranslate2', 'av')"
        " if m in sys.modules]\nprint('HEAVY', heavy)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "HEAVY []" in out.stdout
    for command in ("transcribe", "backends", "profiles", "models"):
        assert command in out.stdout


def test_version_and_transcribe_help():
    assert run_cli("--version").stdout.startswith("kvscribe ")
    helptext = run_cli("transcribe", "--help").stdout
    for option in (
        "--backend",
        "--profile",
        "--model",
        "--language",
        "--task",
        "--output-format",
        "--output-dir",
        "--beam-size",
        "--stats-json",
        "--quiet",
        "--debug",
        "--cluster",
        "--ship-audio",
    ):
        assert option in helptext
    # Rich markup would eat "[ray]" from the install hint unless it is escaped.
    assert "kvscribe[ray]" in helptext.replace("\n", "").replace("│", "").replace(" ", "")


@pytest.mark.slow
def test_info_commands():
    backends = run_cli("backends")
    assert (
        backends.code == 0 and "ctranslate2" in backends.stdout and "available" in backends.stdout
    )
    onnx_row = next(line for line in backends.stdout.splitlines() if line.startswith(" onnx "))
    assert "onnxruntime:" in onnx_row  # its execution providers in this install
    assert "Azure" not in backends.stdout  # devices, not onnxruntime's Azure cloud provider
    profiles = run_cli("profiles")
    assert profiles.code == 0 and "tiny-vram" in profiles.stdout and "auto picks" in profiles.stdout
    shown = run_cli("profiles", "show", "tiny-vram")
    assert shown.code == 0 and "int8_float16" in shown.stdout and "sink=4" in shown.stdout
    assert run_cli("profiles", "show", "nope").code == ExitCode.USAGE
    models = run_cli("models")
    assert models.code == 0 and "tiny.en" in models.stdout and "ready" in models.stdout


def test_shell_completion_script_is_offered():
    # Typer detects the shell from the parent process, so run it from bash as a user
    # would (`; exit` keeps bash from exec-ing into kvscribe and leaving the tree).
    result = subprocess.run(
        ["bash", "-c", f"'{KVSCRIBE}' --show-completion; exit $?"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "complete" in result.stdout and "_KVSCRIBE_COMPLETE" in result.stdout
