"""`--help` fits its width (kvscribe/cli/help_layout.py): every flag's name whole in an
80-column terminal and in a pipe, typer's panels where they fit. The real CLI, every
command."""

from __future__ import annotations

import os
import subprocess

import pytest
from typer.main import get_command

from kvscribe.cli.app import app
from kvscribe.cli.help_layout import RICH_HELP_COLUMNS, asks_for_help
from tests.conftest import KVSCRIBE
from tests.doc_pages import cli_reference_module


def _long_flags(path: tuple[str, ...]) -> list[str]:
    """The long flags `kvscribe PATH` takes (aliases hidden from help left out)."""
    command = get_command(app)
    for name in path:
        command = command.commands[name]
    return [
        opt
        for param in command.params
        if not getattr(param, "hidden", False)
        for opt in (*param.opts, *param.secondary_opts)
        if opt.startswith("--")
    ]


COMMANDS = {path: _long_flags(path) for path in cli_reference_module().commands()}


def _help(path: tuple[str, ...], columns: int | None) -> str:
    """`kvscribe PATH --help` at `columns` in a terminal's environment, or in a pipe as it
    comes (None: no width given at all)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    done = subprocess.run(
        [str(KVSCRIBE), *path, "--help"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("columns", [80, None], ids=["80 columns", "a pipe"])
def test_narrow_help_names_every_flag_whole(columns):
    shown_for = {}
    for path, flags in COMMANDS.items():
        shown = shown_for[path] = _help(path, columns)
        assert "…" not in shown, path
        assert "╭" not in shown, path  # click's plain layout
        for flag in flags:
            assert flag in shown, (path, flag)
        assert "[bold]" not in shown and "\\[" not in shown, path  # rich's markup, gone
        assert max(len(line) for line in shown.splitlines()) <= 80, path
    # A group's list shows each command's line whole (click cut it: "settles,...").
    listed = shown_for[()]  # `kvscribe --help`, run above
    assert "stats at\n" in listed and "the end." in listed


def test_panels_where_they_fit_shorten_no_flag():
    """RICH_HELP_COLUMNS is the narrowest width where no command's panels shorten a name:
    a new flag that needs more fails here (raise the constant)."""
    for path in COMMANDS:
        shown = _help(path, RICH_HELP_COLUMNS)
        assert "╭" in shown and "…" not in shown, path
    assert "╭" not in _help(("transcribe",), RICH_HELP_COLUMNS - 1)  # narrower: plain


def test_help_is_asked_by_its_flags_before_a_double_dash_or_by_nothing():
    assert asks_for_help([]) and asks_for_help(["-h"]) and asks_for_help(["mic", "--help"])
    assert not asks_for_help(["talk.wav"]) and not asks_for_help(["--", "--help"])
    assert not asks_for_help(["transcribe", "--", "-h"])


def test_a_bare_command_that_prints_its_help_prints_it_plain_too():
    env = {**os.environ, "COLUMNS": "80"}
    for path in (("transcribe",), ("setup",)):
        done = subprocess.run([str(KVSCRIBE), *path], capture_output=True, text=True, env=env)
        shown = done.stdout + done.stderr
        assert shown.startswith(f"Usage: kvscribe {path[0]} ") and "╭" not in shown, shown
    listed = subprocess.run([str(KVSCRIBE), "profiles"], capture_output=True, text=True, env=env)
    assert listed.returncode == 0 and "Usage:" not in listed.stdout  # runs: lists profiles
