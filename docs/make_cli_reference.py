"""Write docs/cli.md: the `--help` of `kvscribe` and of each of its subcommands.

    .venv/bin/python docs/make_cli_reference.py          # rewrite docs/cli.md
    .venv/bin/python docs/make_cli_reference.py --check  # exit 1 if docs/cli.md is stale

The subcommands are read from the typer app (kvscribe/cli/app.py), and each help text is
what the installed `kvscribe` prints in a plain 100-column terminal, so the page is the
same on every machine. tests/test_docs.py fails when the page is stale.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
PAGE = DOCS / "cli.md"
COMMAND = ".venv/bin/python docs/make_cli_reference.py"
WIDTH = 100

# A plain terminal of a fixed width: no colours, no terminal detection, UTF-8 boxes.
_ENV = {
    "COLUMNS": str(WIDTH),
    "TERMINAL_WIDTH": str(WIDTH),
    "LINES": "50",
    "NO_COLOR": "1",
    "TERM": "dumb",
    "PYTHONIOENCODING": "utf-8",
}
_DROP = ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS", "TYPER_USE_RICH", "CLICOLOR_FORCE")


def _rich_help_columns() -> int:
    from kvscribe.cli.help_layout import RICH_HELP_COLUMNS

    return RICH_HELP_COLUMNS


def commands() -> list[tuple[str, ...]]:
    """Every command path, in the app's order: (), ("transcribe",), ("profiles", "show"), ..."""
    from typer.core import TyperGroup
    from typer.main import get_command

    from kvscribe.cli.app import app

    found: list[tuple[str, ...]] = []

    def walk(command, path: tuple[str, ...]) -> None:
        found.append(path)
        if isinstance(command, TyperGroup):
            for name, sub in command.commands.items():
                if not sub.hidden:
                    walk(sub, (*path, name))

    walk(get_command(app), ())
    return found


def _kvscribe() -> str:
    beside = Path(sys.executable).parent / "kvscribe"
    found = str(beside) if beside.exists() else shutil.which("kvscribe")
    if found is None:
        raise SystemExit("no kvscribe executable: install the project first (see the README)")
    return found


def help_text(path: tuple[str, ...]) -> str:
    """What `kvscribe PATH... --help` prints, without trailing spaces or edge blank lines."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP} | _ENV
    out = subprocess.run(
        [_kvscribe(), *path, "--help"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        check=True,
        timeout=120,
    ).stdout
    return "\n".join(line.rstrip() for line in out.splitlines()).strip("\n")


def render() -> str:
    """The whole page."""
    panels_from = _rich_help_columns()
    parts = [
        "# CLI reference",
        "",
        "Every command's `--help`, as kvscribe prints it in a 100-column terminal.",
        "`kvscribe FILE...` is short for `kvscribe transcribe FILE...`; a file named like a",
        "command is given as `./NAME`, and a word close to a command's name that names no file",
        "(`kvscribe backend`) is a usage error (exit 2) that names the command meant.",
        f"Help is laid out in typer's panels from {panels_from} columns on; narrower, and in",
        "a pipe, in click's plain layout (as here), where no flag's name is shortened.",
        "",
        f"This page is generated: do not edit it. After changing a command, run `{COMMAND}`.",
    ]
    for path in commands():
        name = " ".join(("kvscribe", *path))
        parts += ["", f"## `{name}`", "", "```text", help_text(path), "```"]
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    page = render()
    if "--check" in argv:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.name} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
