"""`kvscribe transcribe FILE...`: transcript on stdout, progress and stats on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Literal

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from kvscribe.cli.render import print_error, setup_logging, stats_table, stderr_console
from kvscribe.errors import ExitCode, KvscribeError
from kvscribe.options import TranscribeOptions, parse_formats
from kvscribe.types import Segment, Transcript
from kvscribe.writers import RENDERERS, atomic_write_text, render_console_line


def _complete_profiles(incomplete: str) -> list[str]:
    from kvscribe import profile

    return [name for name in profile.available() if name.startswith(incomplete)]


def _complete_backends(incomplete: str) -> list[str]:
    from kvscribe import registry

    return [name for name in registry.discover() if name.startswith(incomplete)]


def transcribe(
    files: list[Path] = typer.Argument(
        ..., metavar="FILE...", show_default=False, help="Audio or video files, or folders of them."
    ),
    backend: str = typer.Option(
        "ctranslate2",
        "--backend",
        "-b",
        autocompletion=_complete_backends,
        help="Inference backend (`kvscribe backends`).",
    ),
    profile: str = typer.Option(
        "auto",
        "--profile",
        "-p",
        autocompletion=_complete_profiles,
        help="Hardware profile (`kvscribe profiles`).",
    ),
    model: str = typer.Option(
        None,
        "--model",
        "-m",
        show_default="tiny.en (embedded)",
        help="Model name or path (`kvscribe models`).",
    ),
    language: str = typer.Option(
        None,
        "--language",
        "-l",
        show_default="detect",
        help="Spoken language code, e.g. en, de; detected when omitted.",
    ),
    task: Literal["transcribe", "translate"] = typer.Option(
        "transcribe", "--task", help="Transcribe, or translate into English."
    ),
    output_format: str = typer.Option(
        None,
        "--output-format",
        "-f",
        show_default="all with -o, else text on stdout",
        help="txt, srt, vtt, json, tsv or all; comma-separated for several.",
    ),
    output_dir: Path = typer.Option(
        None,
        "--output-dir",
        "-o",
        file_okay=False,
        help="Write <stem>.<format> files into this folder.",
    ),
    beam_size: int = typer.Option(
        None, "--beam-size", show_default="profile's", help="Beam width (1 = greedy)."
    ),
    device: Literal["auto", "cpu", "cuda", "mps"] = typer.Option(
        None, "--device", show_default="profile's", help="Run on this device."
    ),
    kv_policy: str = typer.Option(
        None,
        "--kv-policy",
        show_default="profile's",
        help="Self-attention KV policy, e.g. 'sink=4,window=64,q8_0@layers>=2' "
        "(parts: full, half, window=N, sink=N, q8_0, q4_0, residual=N; clauses joined by ';').",
    ),
    kv_cross: str = typer.Option(
        None,
        "--kv-cross",
        show_default="profile's",
        help="Cross-attention KV policy: full, shared, shared,q8_0.",
    ),
    stats_json: Path = typer.Option(
        None, "--stats-json", dir_okay=False, help="Also write the stats report to this JSON file."
    ),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="Only the transcript and errors: no progress or stats."
    ),
    debug: bool = typer.Option(False, "--debug", help="Show tracebacks and debug logs."),
) -> None:
    """Transcribe audio files: transcript on stdout, stats on stderr."""
    console = stderr_console()
    setup_logging(debug)
    try:
        code = _run(
            TranscribeOptions(
                inputs=tuple(files),
                backend=backend,
                profile=profile,
                model=model,
                language=language,
                task=task,
                formats=parse_formats(output_format, to_dir=output_dir is not None),
                output_dir=output_dir,
                beam_size=beam_size,
                device=device,
                stats_json=stats_json,
                quiet=quiet,
                kv_policy=kv_policy,
                kv_cross=kv_cross,
            )
        )
    except KvscribeError as exc:
        if debug:
            console.print_exception()
        print_error(console, exc)
        raise typer.Exit(exc.exit_code) from None
    raise typer.Exit(code)


def _run(options: TranscribeOptions) -> int:
    from kvscribe.runner import Runner, check_output_collisions, expand_inputs

    inputs = expand_inputs(options.inputs)
    check_output_collisions([p for p, err in inputs if err is None], options)
    console = stderr_console()
    with TerminalListener(options, console, several=len(inputs) > 1) as listener:
        if all(err is not None for _, err in inputs):  # nothing to do: skip loading the model
            for path, err in inputs:
                listener.file_failed(path, err)
            return _exit_code([err for _, err in inputs], len(inputs))
        stats = Runner(options).run(inputs, listener)
    report = stats.to_dict()
    if options.stats_json is not None:
        atomic_write_text(options.stats_json, json.dumps(report, indent=2) + "\n")
    if not options.quiet and stats.done:
        console.print(stats_table(report))
    return _exit_code(listener.failures, len(inputs))


def _exit_code(failures: list[KvscribeError], total: int) -> int:
    if not failures:
        return ExitCode.OK
    return failures[0].exit_code if total == 1 else ExitCode.SOME_FAILED


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

    def segment(self, source: Path, segment: Segment) -> None:
        if self.stream_lines:
            sys.stdout.write(render_console_line(segment.start, segment.end, segment.text) + "\n")
            sys.stdout.flush()
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, completed=segment.end)

    def file_done(self, source: Path, transcript: Transcript, outputs: list[Path]) -> None:
        self._drop_task()
        if self.options.output_dir is None and self.options.formats:
            sys.stdout.write(RENDERERS[self.options.formats[0]](transcript))
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
