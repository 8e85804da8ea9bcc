"""The `kvscribe` command: `kvscribe FILE...` transcribes; subcommands inspect the setup.

Nothing heavy is imported here: `kvscribe --help` must stay fast.
"""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from typer.core import TyperGroup

from kvscribe import __version__
from kvscribe.cli import quick_exit
from kvscribe.cli.termination import sigterm_stops_like_ctrl_c
from kvscribe.errors import ExitCode

_ROOT_FLAGS = {"--help", "-h", "--version", "--install-completion", "--show-completion"}


class _TranscribeByDefault(TyperGroup):
    """`kvscribe a.wav` means `kvscribe transcribe a.wav` (a file named like a command: use ./)."""

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in _ROOT_FLAGS:
            _refuse_a_mistyped_command(args[0], list(self.commands))
            args = ["transcribe", *args]
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: typer.Context) -> list[str]:
        return list(self.commands)  # keep declaration order: transcribe first


def _refuse_a_mistyped_command(word: str, commands: list[str]) -> None:
    """`kvscribe backend` with no file of that name: a command mistyped, said so with the
    one meant, where "backend: no such file" sent the user looking for a file."""
    import difflib
    import os

    if not word.isalpha() or os.path.lexists(word):
        return
    meant = difflib.get_close_matches(word.lower(), commands, n=1, cutoff=0.75)
    if meant:
        sys.stderr.write(
            f"kvscribe: error: {word}: no such command or file "
            f"(did you mean `kvscribe {meant[0]}`?)\n"
        )
        sys.exit(ExitCode.USAGE)


app = typer.Typer(
    cls=_TranscribeByDefault,
    name="kvscribe",
    no_args_is_help=True,
    rich_markup_mode="rich",
    # Plain help (narrow terminals) wraps at the terminal's width, not click's 80.
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 200},
    help="Transcribe speech with Whisper on modest hardware.\n\n"
    "kvscribe FILE... is short for kvscribe transcribe FILE...\n\n"
    "Examples:\n"
    "  kvscribe talk.wav                      transcript on stdout, stats on stderr\n"
    "  kvscribe talk.wav --profile tiny-vram  pick a hardware profile\n"
    "  kvscribe recordings/ -o out/ -r        a folder tree; rerun to resume\n"
    "  kvscribe mic --live                    text as you speak (Ctrl-C to stop)\n"
    "  kvscribe serve --port 8000             OpenAI's audio API for applications\n"
    "  kvscribe bench --baseline              compare backends, profiles, policies",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvscribe {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Transcribe speech with Whisper on modest hardware."""


def _register() -> None:
    from kvscribe.cli import bench, info, live, serve, setup, transcribe
    from kvscribe.cli.aliases import SnakeCaseAliases

    app.command("transcribe", no_args_is_help=True, cls=SnakeCaseAliases)(transcribe.transcribe)
    app.command("mic", cls=SnakeCaseAliases)(live.mic)
    app.command("serve")(serve.serve)
    app.command("backends")(info.backends)
    app.add_typer(info.profiles_app, name="profiles")
    app.command("models")(info.models_command)
    app.add_typer(setup.setup_app, name="setup")
    app.command("bench")(bench.bench)


_register()


def main() -> NoReturn:
    """Console entry point: `run()`, then the process ends at once (kvscribe.cli.quick_exit)."""
    try:
        run()
    except SystemExit as finished:  # typer ends every command this way
        quick_exit.leave(quick_exit.exit_code(finished))
    quick_exit.leave(0)


def _exit_on_a_full_disk(exc: Exception) -> None:
    """A write to stdout (or a file written as it goes) on a full disk: one line, exit 1."""
    from kvscribe.atomic_file import write_failure

    failure = write_failure(exc) if isinstance(exc, OSError) else None
    if failure is not None:
        sys.stderr.write(f"kvscribe: error: {failure.one_line()}\n")
        sys.exit(failure.exit_code)


def _stdout_was_closed() -> bool:
    """Click ends a command whose stdout reader went away (EPIPE) with a silent exit 1,
    having wrapped stdout to keep the exit's own flush quiet (by name: typer carries a
    click of its own, whose class is not click's)."""
    return type(sys.stdout).__name__ == "PacifyFlushWrapper"


def _command():
    """The app as a click command (what `app()` runs), its help in the layout that fits."""
    from typer.main import get_command

    from kvscribe.cli.help_layout import plain_where_narrow

    return plain_where_narrow(get_command(app), sys.argv[1:])


def run() -> None:
    """The command in this process: usage errors exit 2, unexpected ones exit 1 in one line
    (raised as SystemExit, so a caller in the same process sees the status)."""
    debug = "--debug" in sys.argv
    try:
        with sigterm_stops_like_ctrl_c():
            _command()()
    except KeyboardInterrupt:
        sys.stderr.write("kvscribe: interrupted\n")
        sys.exit(ExitCode.INTERRUPTED)
    except SystemExit as exc:
        if exc.code == 1 and _stdout_was_closed():
            sys.exit(ExitCode.PIPE_CLOSED)  # click's exit 1 would read as "inputs failed"
        raise
    except Exception as exc:
        if debug:
            raise
        _exit_on_a_full_disk(exc)
        sys.stderr.write(
            f"kvscribe: internal error: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback, and please report it)\n"
        )
        sys.exit(ExitCode.SOME_FAILED)
