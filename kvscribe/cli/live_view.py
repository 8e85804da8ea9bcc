"""How a live session looks: a rich Live panel on a terminal (committed text normal, the
tentative tail dim, a status line), plain committed lines into a pipe, and `-o FILE` appended
to as text is committed."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from kvscribe.cli.render import human_bytes, policy_rows
from kvscribe.errors import OutputError
from kvscribe.live.stats import LiveStats
from kvscribe.provenance import MEASURED, weakest_kind

STOPPING = "finishing the utterance in progress (Ctrl-C again to stop at once)"


class TranscriptFile:
    """Appends committed words as they come and ends each utterance's line, flushing each
    time (and fsync per line): a crash loses at most the words not yet committed."""

    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # as --stats-json's folders are
            mid_line = _ends_mid_line(path)
            self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 (long-lived)
            if mid_line:  # an earlier session was killed mid-utterance
                self._file.write("\n")
        except OSError as exc:
            raise OutputError(
                f"cannot append to it: {exc.strerror or exc}",
                subject=str(path),
                hint="pick a writable file path for -o",
            ) from None
        self._line_open = False

    def committed(self, text: str) -> None:
        self._write((" " if self._line_open else "") + text)
        self._line_open = True

    def utterance_done(self) -> None:
        if self._line_open:
            self._write("\n", sync=True)
        self._line_open = False

    def close(self) -> None:
        try:
            self.utterance_done()
        finally:
            with contextlib.suppress(OSError):  # what is left unwritten was said above
                self._file.close()

    def _write(self, text: str, sync: bool = False) -> None:
        try:
            self._file.write(text)
            self._file.flush()
            if sync and stat.S_ISREG(os.fstat(self._file.fileno()).st_mode):
                os.fsync(self._file.fileno())
        except OSError as exc:
            raise OutputError(
                f"write failed: {exc.strerror or exc}",
                subject=str(self.path),
                hint="free some disk space or pick another file for -o",
            ) from None


def _ends_mid_line(path: Path) -> bool:
    """Whether a regular file's last byte is not a newline. Read as a byte: the last
    character of a killed session's text may be several (é, …), and text mode could not
    decode its last byte alone."""
    if not path.is_file():
        return False
    with open(path, "rb") as existing:
        if existing.seek(0, os.SEEK_END) == 0:
            return False
        existing.seek(-1, os.SEEK_END)
        return existing.read(1) != b"\n"


class LiveView:
    """The session's listener for the terminal and the transcript file."""

    def __init__(
        self,
        stats: LiveStats,
        output: TranscriptFile | None,
        quiet: bool,
        on_first_audio: Callable[[], None] | None = None,
    ):
        self.stats = stats
        self.output = output
        self._on_first_audio = None if quiet else on_first_audio
        self.out = Console(highlight=False, soft_wrap=True)
        self.interactive = self.out.is_terminal and not quiet
        self._committed: list[str] = []
        self._tentative = ""
        self._level = -100.0
        self._speaking = False
        self._stopping = False
        self._quiet = quiet
        self._live: Live | None = None

    def __enter__(self) -> LiveView:
        if self.interactive:
            self._live = Live(
                get_renderable=self._render, console=self.out, refresh_per_second=8, transient=True
            )
            self._live.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._live is not None:
            self._live.stop()
        if self.output is not None:
            self.output.close()

    # -- LiveListener ---------------------------------------------------------------------

    def committed(self, text: str) -> None:
        self._committed.append(text)
        if self.output is not None:
            self.output.committed(text)

    def tentative(self, text: str) -> None:
        self._tentative = text

    def utterance_done(self, text: str, latency: float) -> None:
        self._committed, self._tentative = [], ""
        if self.output is not None:
            self.output.utterance_done()
        if self._live is not None:
            self._live.console.print(text)  # above the live panel, for good
        else:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()

    def heard(self, level_db: float, speaking: bool) -> None:
        self._level, self._speaking = level_db, speaking
        if self._on_first_audio is not None:
            self._on_first_audio()
            self._on_first_audio = None

    def stopping(self) -> None:
        """Asked to stop (called from a signal handler): said in the status line, or in
        one line on stderr, written whole by the kernel (no stream buffer to re-enter)."""
        self._stopping = True
        if self._live is None and not self._quiet:
            os.write(2, f"kvscribe: {STOPPING}\n".encode())

    # -- drawing ----------------------------------------------------------------------------

    def _render(self) -> Group:
        line = Text(" ".join(self._committed))
        if self._tentative:
            line.append((" " if self._committed else "") + self._tentative, style="dim")
        return Group(line, self._status())

    def _status(self) -> Text:
        s = self.stats
        latency = f"{s.latencies[-1]:.2f} s" if s.latencies else "-"
        bar = "#" * max(0, min(20, int((self._level + 60) / 3)))
        status = Text(style="dim")
        status.append(
            "● speech " if self._speaking else "○ quiet  ",
            style="bold green" if self._speaking else "dim",
        )
        status.append(
            f"level {bar:<20} {self._level:5.0f} dB | latency {latency} | "
            f"KV {human_bytes(s.kv_bytes)}{_kv_mark(s)} | audio {s.audio_seconds:6.1f} s | "
            f"dropped {s.dropped_seconds:.1f} s{_overflow_mark(s)} | "
            + (STOPPING if self._stopping else "Ctrl-C to stop")
        )
        for label, note in policy_rows(s.notes, sorted(s.kv.not_applicable)):
            status.append(f"\n{label}: {note}", style="yellow")
        return status


def _kv_mark(stats: LiveStats) -> str:
    """' (estimated)' or ' (derived)' when the KV figure is not all measured."""
    if not stats.decode_seconds:
        return ""  # nothing decoded yet: no figure to qualify
    kind = weakest_kind(stats.kv.provenance)
    return "" if kind == MEASURED else f" ({kind})"


def _overflow_mark(stats: LiveStats) -> str:
    return f" + {stats.input_overflows} device overflows" if stats.input_overflows else ""
