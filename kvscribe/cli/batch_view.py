"""How a batch run looks: on a terminal, bars (the files, and each file in progress with
its audio seconds and time left) or, elsewhere, one line per file, on stderr; each segment
as it becomes final, also on stderr (stdout carries only `--json`'s events); a summary.

Segments are printed on a non-terminal stderr too: a line per final segment is what `kvscribe
FILE` prints without -o (so no flood, unlike a redrawn bar), and it keeps a CI log moving
through a long file. With several inputs each line starts with its file's path, since files
run side by side with --jobs N and --cluster."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, TaskID
from rich.table import Table
from rich.text import Text

from kvscribe.batch import Result, Summary, Task
from kvscribe.cli.render import print_error
from kvscribe.cli.terminal import audio_done, audio_progress
from kvscribe.errors import KvscribeError, shown_name
from kvscribe.inputs import Input
from kvscribe.manifest import Record
from kvscribe.types import Segment
from kvscribe.writers import render_console_line


class BatchView:
    def __init__(self, console: Console, json_events: bool, quiet: bool, inputs: int):
        self.console = console
        self.several = inputs > 1  # one file gets no plan line and no batch summary
        self.json_events = json_events
        self.quiet = quiet
        self.total = 0
        self.completed = 0
        self.failures = 0
        self.audio_seconds = 0.0
        self._progress: Progress | None = None
        self._task: TaskID | None = None  # the files bar (several inputs)
        self._bars: dict[Path, TaskID] = {}  # a bar per file in progress

    # -- BatchListener -------------------------------------------------------------------

    def planned(self, todo: list[Task], skipped: list[tuple[Path, Record]]) -> None:
        self.total = len(todo)
        done_before = [path for path, record in skipped if record.status == "done"]
        failed_before = [(path, record) for path, record in skipped if record.status != "done"]
        for path in done_before:
            self._event("skipped", path, reason="done before, unchanged")
        for path, record in failed_before:
            self._event("failed", path, error=record.error, exit_code=record.exit_code, seconds=0)
            self._error_line(f"{record.error} [failed before, unchanged: not retried]")
        if not self.several and done_before and not self.quiet:
            self.console.print(
                escape(f"{done_before[0]}: done before, unchanged (--force redoes it)"),
                style="dim",
                soft_wrap=True,
            )
        elif self.several and not self.quiet:
            self.console.print(
                f"{len(todo)} to transcribe, {len(done_before)} done before, "
                f"{len(failed_before)} failed before (unchanged)",
                style="dim",
            )
        if todo and not self.quiet and self.console.is_terminal:
            self._progress = audio_progress(self.console)
            self._progress.start()
            if self.several:  # one file's own bar says it all
                self._task = self._progress.add_task(
                    "[bold]transcribing", total=len(todo), done=self._files_done()
                )

    def started(self, task: Task) -> None:
        self._event("started", task.path)
        if self._progress is not None:  # its worker may still be loading the model: no total
            name = ("  " if self.several else "") + escape(task.path.name)
            self._bars[task.path] = self._progress.add_task(name, total=None, done="starting")

    def progress(
        self, task: Task, seconds_done: float, duration: float, segment: Segment | None
    ) -> None:
        if self.quiet:
            return
        if segment is not None:
            line = Text(render_console_line(segment.start, segment.end, segment.text))
            if self.several:
                line = Text.assemble((f"{task.path} ", "dim"), line)
            self.console.print(line, soft_wrap=True)
        bar = self._bars.get(task.path)
        if self._progress is None or bar is None:
            return
        done = audio_done(seconds_done, duration)
        if segment is None:  # decoding begins: time left counts from now, not from the load
            self._progress.reset(bar, total=max(duration, 0.01), done=done)
        else:
            self._progress.update(bar, completed=seconds_done, done=done)
        self._progress.refresh()  # a slow file's bar moves with its segments, not later

    def retrying(self, task: Task, attempt: int, attempts: int, reason: str) -> None:
        self._event("retrying", task.path, attempt=attempt, attempts=attempts, reason=reason)
        if self._progress is not None and task.path in self._bars:  # back to the start
            self._progress.reset(self._bars[task.path], total=None, done="starting")
        if not self.quiet:
            console = self._progress.console if self._progress is not None else self.console
            line = (
                f"{task.path}: the worker transcribing it was lost ({reason}); "
                f"retrying it (attempt {attempt} of {attempts})"
            )
            console.print(f"[yellow]kvscribe: warning:[/] {escape(line)}", soft_wrap=True)

    def finished(self, result: Result) -> None:
        self.completed += 1
        path = result.task.path
        bar = self._bars.pop(path, None)
        if self._progress is not None and bar is not None:
            if result.error is None:
                self._draw_whole(bar)
            self._progress.remove_task(bar)
        seconds = round(result.stats.decode_seconds, 3) if result.stats else 0.0
        if result.error is None:
            self.audio_seconds += result.stats.audio_seconds if result.stats else 0.0
            stats = result.stats
            language = stats.language if stats else None
            probability = stats.language_probability if stats else None
            report = stats.report if stats else None
            self._event(
                "done",
                path,
                outputs=result.outputs,
                seconds=seconds,
                language=language,
                language_probability=probability,
                speech_unread_seconds=round(report.unread_speech_seconds, 2) if report else 0.0,
            )
            if not self.quiet and self._progress is None:
                line = f"[{self.completed}/{self.total}] {shown_name(path)}"
                if probability is not None:
                    line += f" (detected language: {language}, p = {probability:.2f})"
                self.console.print(
                    escape(line),
                    style="dim",
                    soft_wrap=True,
                )
            self._warn_unread(path, report)
        else:
            self.failures += 1
            self._event(
                "failed",
                path,
                error=result.error.one_line(),
                exit_code=result.error.exit_code,
                seconds=seconds,
            )
            self._error(result.error)
        self._advance()

    def _warn_unread(self, path, report) -> None:
        """Speech the batched decoder skipped in every read of it is missing from the
        transcript: say so, with the fix (kvscribe.rereads)."""
        if self.quiet or report is None or not report.unread_stretches:
            return
        line = (
            f"{shown_name(path)}: {report.unread_speech_seconds:.1f} s of speech "
            f"({report.unread_stretches} stretch(es)) was skipped by every read and is not in "
            "the transcript; --batch-size 1 reads the file in order instead"
        )
        console = self._progress.console if self._progress is not None else self.console
        console.print(f"[yellow]kvscribe: warning:[/] {escape(line)}", soft_wrap=True)

    def failed_input(self, entry: Input) -> None:
        assert entry.error is not None
        self._event(
            "failed", entry.path, error=entry.error.one_line(), exit_code=entry.error.exit_code
        )
        self._error(entry.error)

    # -- output --------------------------------------------------------------------------

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def summary(self, summary: Summary, wall_seconds: float) -> Table:
        table = Table(title="kvscribe batch", title_justify="left", show_header=False, box=None)
        table.add_column(style="bold")
        table.add_column()
        audio = summary.audio_seconds
        rows = [
            ("transcribed", str(summary.done)),
            ("failed", str(summary.failed + summary.input_errors)),
            ("skipped: done before", str(summary.skipped_done)),
            ("skipped: failed before", str(summary.skipped_failed)),
            ("audio transcribed", f"{audio / 3600:.3f} h ({audio:.1f} s)"),
            ("wall", f"{wall_seconds:.1f} s"),
        ]
        if audio and wall_seconds:
            rows.append(("throughput", f"{audio / wall_seconds:.1f}x real time"))
        if summary.stopped_by:  # those in progress are not finished either
            rows.append(("stopped", f"by {summary.stopped_by} (rerun to resume)"))
            rows.append(("not finished", str(summary.not_started)))
        elif summary.not_started:
            rows.append(("not started", str(summary.not_started)))
        for label, value in rows:
            table.add_row(label, value)
        return table

    def _draw_whole(self, bar) -> None:
        """A file's bar drawn once at all its audio before it goes: a file decoded between two
        of the display's refreshes would otherwise leave its last frame short of the end."""
        total = next((task.total for task in self._progress.tasks if task.id == bar), None)
        if total is None:  # never started decoding: nothing to complete
            return
        self._progress.update(bar, completed=total, done=audio_done(total, total))
        self._progress.refresh()

    def _advance(self) -> None:
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, advance=1, done=self._files_done())
        self._progress.refresh()  # every count is drawn, even when two files end at once

    def _files_done(self) -> str:
        text = f"{self.completed}/{self.total} files  {self.audio_seconds / 3600:.2f} h audio"
        return text + (f"  [red]{self.failures} failed[/]" if self.failures else "")

    def _event(self, kind: str, path: Path, **fields) -> None:
        if not self.json_events:
            return
        sys.stdout.write(json.dumps({"event": kind, "path": shown_name(path), **fields}) + "\n")
        sys.stdout.flush()

    def _error(self, error: KvscribeError) -> None:
        if self._progress is not None:
            self._progress.console.print(
                f"[bold red]kvscribe: error:[/] {escape(error.one_line())}", soft_wrap=True
            )
        else:
            print_error(self.console, error)

    def _error_line(self, text: str) -> None:
        self.console.print(
            f"[bold red]kvscribe: error:[/] {escape(text)}", soft_wrap=True, highlight=False
        )
