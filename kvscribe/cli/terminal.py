"""What `kvscribe FILE...` shows while it runs without an output folder: segments on
stdout as they are decoded, progress, the detected language and errors on stderr."""

from __future__ import annotations

import sys
from pathlib import Path

from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from kvscribe.cli.render import print_error
from kvscribe.errors import KvscribeError
from kvscribe.options import TranscribeOptions
from kvscribe.types import Segment, Transcript
from kvscribe.writers import RENDERERS, render_console_line


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

    def __enter__(self) -> TerminalListener:
        if not self.options.quiet and self.console.is_terminal:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed:.0f}/{task.total:.0f} s audio"),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        if self._progress is not None:
            self._progress.stop()

    def file_started(self, source: Path, duration: float) -> None:
        if self.several and not self.options.quiet:
            self.console.rule(f"{source} ({duration:.1f} s)", align="left", style="dim")
        if self._progress is not None:
            self._task = self._progress.add_task(source.name, total=max(duration, 0.01))

    def language(self, source: Path, language: str, probability: float | None) -> None:
        """openai-whisper's "Detected language" line, when the model detected it."""
        if probability is not None and not self.options.quiet:
            self.console.print(f"[dim]detected language: {language} (p = {probability:.2f})[/]")

    def segment(self, source: Path, segment: Segment) -> None:
        if self.stream_lines:
            sys.stdout.write(render_console_line(segment.start, segment.end, segment.text) + "\n")
            sys.stdout.flush()
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=segment.end)

    def file_done(self, source: Path, transcript: Transcript, outputs: list[Path]) -> None:
        self._drop_task()
        if self.options.output_dir is None and self.options.formats:
            render = RENDERERS[self.options.formats[0]]
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
