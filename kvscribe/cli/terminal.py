"""What `kvscribe FILE...` shows while it runs without an output folder: segments on
stdout as they are decoded, progress, the detected language and errors on stderr. The
audio bar is shared with the batch view (kvscribe.cli.batch_view), which runs with -o."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from kvscribe.cli.render import print_error
from kvscribe.errors import KvscribeError, shown_name
from kvscribe.options import TranscribeOptions
from kvscribe.types import Segment, Transcript
from kvscribe.writers import RENDERERS, render_console_line, render_json_line


class TerminalListener:
    """Streams segments to stdout; progress, file headers and errors to stderr."""

    def __init__(self, options: TranscribeOptions, console, several: bool):
        self.options = options
        self.console = console
        self.several = several
        self.failures: list[KvscribeError] = []
        self.stream_lines = not options.formats or (
            options.output_dir is not None and not options.quiet
        )
        self._progress: Progress | None = None
        self._task = None
        self._duration = 0.0

    def __enter__(self) -> TerminalListener:
        if not self.options.quiet and self.console.is_terminal:
            self._progress = audio_progress(self.console)
            self._progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._progress is not None:
            self._progress.stop()

    def file_started(self, source: Path, duration: float) -> None:
        if self.several and not self.options.quiet:
            self.console.rule(f"{shown_name(source)} ({duration:.1f} s)", align="left", style="dim")
        self._duration = duration
        if self._progress is not None:
            self._task = self._progress.add_task(
                escape(source.name), total=max(duration, 0.01), done=audio_done(0.0, duration)
            )

    def language(self, source: Path, language: str, probability: float | None) -> None:
        """openai-whisper's "Detected language" line, when the model detected it."""
        if probability is not None and not self.options.quiet:
            self.console.print(f"[dim]detected language: {language} (p = {probability:.2f})[/]")

    def segment(self, source: Path, segment: Segment) -> None:
        if self.stream_lines:
            sys.stdout.write(render_console_line(segment.start, segment.end, segment.text) + "\n")
            sys.stdout.flush()
        if self._progress is not None and self._task is not None:
            done = audio_done(segment.end, self._duration)
            self._progress.update(self._task, completed=segment.end, done=done)

    def file_done(self, source: Path, transcript: Transcript, outputs: list[Path]) -> None:
        self._drop_task()
        if self.options.output_dir is None and self.options.formats:
            kind = self.options.formats[0]
            render = render_json_line if self.several and kind == "json" else RENDERERS[kind]
            sys.stdout.write(render(transcript, self.options.writer_options()))
            sys.stdout.flush()
        if outputs and not self.options.quiet:
            self.console.print(f"[dim]wrote {', '.join(str(p) for p in outputs)}[/]")

    def file_failed(self, source: Path, error: KvscribeError) -> None:
        self._drop_task()
        self.failures.append(error)
        print_error(self.console, error)

    def _drop_task(self) -> None:
        if self._progress is not None and self._task is not None:
            self._progress.remove_task(self._task)
            self._task = None


class TimeLeftColumn(ProgressColumn):
    """Time left at the pace so far (elapsed x left / done): shown from the first update on,
    where Rich's TimeRemainingColumn waits for two samples inside its 30 s window."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed
        if not task.total or not task.completed or elapsed is None:
            return Text("-:--:--", style="progress.remaining")
        left = int(elapsed * max(task.total - task.completed, 0.0) / task.completed)
        minutes, seconds = divmod(left, 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{hours:d}:{minutes:02d}:{seconds:02d}", style="progress.remaining")


def audio_progress(console: Console) -> Progress:
    """Bars on stderr, one task per file in progress: its name, audio seconds done (the
    task's `done` field, audio_done()) and time left. Transient: gone when it stops."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[done]}"),
        TimeLeftColumn(),
        console=console,
        transient=True,
    )


def audio_done(done: float, duration: float) -> str:
    return f"{done:.0f}/{duration:.0f} s audio"
