"""`--help` laid out to fit its width: typer's rich panels where they fit, click's plain
layout where they do not.

typer draws a command's options as a rich table, and rich shortens a cell that does not
fit its column: below RICH_HELP_COLUMNS columns (and in a pipe, which rich takes for 80)
flags lost their names ("--condition-on-pr…"), docs/cli.md's too. click's plain layout
wraps the descriptions and never shortens a name. Only help is laid out again: usage
errors keep typer's panel, which wraps its one message.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence

# The narrowest terminal where no command's rich help shortens a flag's name (tests/
# test_help_layout.py renders every command at it, and fails when a new flag needs more).
RICH_HELP_COLUMNS = 128
_HELP_FLAGS = ("-h", "--help")


def columns() -> int:
    """The width help is drawn at: typer's own TERMINAL_WIDTH, else COLUMNS or the terminal's
    (80 in a pipe)."""
    forced = os.environ.get("TERMINAL_WIDTH", "")
    return int(forced) if forced.isdigit() else shutil.get_terminal_size((80, 24)).columns


def asks_for_help(args: Sequence[str]) -> bool:
    """`kvscribe` alone, or -h/--help before any `--` (what follows `--` is a file's name)."""
    words = list(args)
    if "--" in words:
        words = words[: words.index("--")]
    return not args or any(word in _HELP_FLAGS for word in words)


def plain_where_narrow(command, args: Sequence[str]):
    """`command` (the app's click command), in click's plain layout when it will print help
    narrower than its panels need."""
    if (asks_for_help(args) or _bare(command, args)) and columns() < RICH_HELP_COLUMNS:
        _plain(command)
    return command


def _bare(command, args: Sequence[str]) -> bool:
    """`args` name a command and nothing else, and that command prints its help then
    (`kvscribe transcribe`, `kvscribe setup`; `kvscribe mic` listens instead)."""
    for word in args:
        command = getattr(command, "commands", {}).get(word)
        if command is None:
            return False
    if getattr(command, "commands", None) is not None:  # a group: help unless it runs bare
        return not command.invoke_without_command
    return bool(command.no_args_is_help)


def _plain(command) -> None:
    """The plain layout for `command` and everything under it, their texts without rich's
    markup (what the panels would have shown: `\\[ray]` as `[ray]`, `[bold]` as nothing),
    and each command's line in its group's list whole, as the panels show it."""
    command.rich_markup_mode = None
    command.help = _without_markup(command.help)
    for param in command.params:
        if getattr(param, "help", None):
            param.help = _without_markup(param.help)
    for sub in getattr(command, "commands", {}).values():
        _plain(sub)
        if not sub.short_help and sub.help:  # click cuts its own at the width ("...")
            sub.short_help = " ".join(sub.help.replace("\b", "").split("\n\n", 1)[0].split())


def _without_markup(text: str | None) -> str | None:
    """What the panels show of `text`, for click: rich's markup gone, and a paragraph with
    indented lines (a list of examples) marked to keep its lines ("\\b"), where click would
    run them together."""
    if not text:
        return text
    from rich.text import Text

    paragraphs = Text.from_markup(text).plain.split("\n\n")
    return "\n\n".join(
        "\b\n" + paragraph
        if any(line[:1].isspace() for line in paragraph.splitlines())
        else paragraph
        for paragraph in paragraphs
    )
