"""Errors a user can act on. Only the CLI turns them into exit codes.

Every error carries the input it is about (a file, a model name, an option)
and a hint that says what to do, so the CLI can print one line.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

# Paths the user never named, shown as what they did name: the spool of `kvscribe -` is
# "stdin" (kvscribe/audio/stdin.py), not a temporary file gone by the time they read it.
_SHOWN_AS: dict[str, str] = {}


@contextmanager
def shown_as(path: object, name: str) -> Iterator[None]:
    """While inside, errors about `path` name it `name`."""
    _SHOWN_AS[str(path)] = name
    try:
        yield
    finally:
        _SHOWN_AS.pop(str(path), None)


def shown_name(path: object) -> str:
    """How messages and events name `path`."""
    return _SHOWN_AS.get(str(path), str(path))


class ExitCode:
    """Process exit codes (docs/stats.md, "Exit codes")."""

    OK = 0
    SOME_FAILED = 1
    USAGE = 2
    INPUT_NOT_FOUND = 3
    AUDIO_UNDECODABLE = 4
    MODEL_NOT_FOUND = 5
    BACKEND_UNAVAILABLE = 6
    INTERRUPTED = 130
    PIPE_CLOSED = 141  # 128 + SIGPIPE: what reads stdout stopped (`| head -1`), as for cat
    TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process SIGTERM ended


class Terminated(KeyboardInterrupt):
    """SIGTERM (a supervisor's stop: `timeout`, systemd, `docker stop`, a scheduler's time
    limit), raised where Ctrl-C's KeyboardInterrupt would be, so that it stops a command
    the same way: finished outputs kept, temporary files removed (kvscribe.cli.termination).
    `seen`: one arrived in this process. A library that turns the interrupt into a
    KeyboardInterrupt of its own (Ray's wait does) loses its type, not its cause."""

    seen = False


def by_sigterm(stop: BaseException) -> bool:
    """Whether an interrupt that stopped a command came from SIGTERM (else: Ctrl-C)."""
    return isinstance(stop, Terminated) or Terminated.seen


class KvscribeError(Exception):
    """Base class: `subject` is what failed, `hint` is the fix."""

    exit_code = ExitCode.SOME_FAILED

    def __init__(self, message: str, *, subject: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.subject = subject
        self.hint = hint

    def one_line(self) -> str:
        """The whole error on one line: `subject: message (hint)`."""
        text = self.message
        if self.subject:
            text = f"{shown_name(self.subject)}: {text}"
        if self.hint:
            text = f"{text} ({self.hint})"
        return " ".join(text.split())


class UsageError(KvscribeError):
    """A bad option value or a bad combination of options."""

    exit_code = ExitCode.USAGE


class InputNotFoundError(KvscribeError):
    """An input path that does not exist, cannot be read, or holds no audio."""

    exit_code = ExitCode.INPUT_NOT_FOUND


class AudioDecodeError(KvscribeError):
    """A file that exists but is not decodable audio (not audio, corrupt, truncated, empty)."""

    exit_code = ExitCode.AUDIO_UNDECODABLE


class ModelNotFoundError(KvscribeError):
    """A model name or path that cannot be resolved or converted."""

    exit_code = ExitCode.MODEL_NOT_FOUND


class BackendUnavailableError(KvscribeError):
    """A backend whose engine, device or binary is missing on this machine."""

    exit_code = ExitCode.BACKEND_UNAVAILABLE


class OutputError(KvscribeError):
    """An output that cannot be written (no permission, full disk)."""

    exit_code = ExitCode.SOME_FAILED


class EngineError(KvscribeError):
    """The engine failed on one input (killed, timed out, crashed); other inputs still run."""

    exit_code = ExitCode.SOME_FAILED
