"""`kvscribe transcribe FILE...`: transcript on stdout, progress and stats on stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from kvscribe.atomic_file import atomic_write_text
from kvscribe.cli import batch_options
from kvscribe.cli import shared_options as shared
from kvscribe.cli.render import (
    exit_with,
    print_error,
    setup_logging,
    stats_table,
    stderr_console,
)
from kvscribe.cli.terminal import TerminalListener
from kvscribe.errors import ExitCode, KvscribeError
from kvscribe.options import TranscribeOptions, parse_formats

_DECODING = shared.DECODING_PANEL
_WORDS = "Word timestamps"
_VAD = "Voice activity (--vad-filter)"


def transcribe(
    files: list[Path] = typer.Argument(
        None,
        metavar="FILE...",
        show_default=False,
        help="Audio or video files, or folders of them.",
    ),
    backend: str = shared.BACKEND.option(),
    profile: str = shared.PROFILE.option(),
    model: str = shared.MODEL.option(),
    language: str = shared.LANGUAGE.option(),
    task: shared.Task = shared.TASK.option(),
    output_format: list[str] = typer.Option(
        None,
        "--output-format",
        "-f",
        show_default="all with -o, else text on stdout",
        metavar="FORMAT[,FORMAT...]",
        help="txt, srt, vtt, json, tsv or all; comma-separated or repeated for several.",
    ),
    output_dir: Path = typer.Option(
        None,
        "--output-dir",
        "-o",
        file_okay=False,
        help="Write <stem>.<format> files into this folder.",
    ),
    beam_size: int = shared.BEAM_SIZE.option(),
    batch_size: int = typer.Option(
        None,
        "--batch-size",
        show_default="profile's",
        help="Speech chunks decoded at once on audio over 30 s (cut at pauses by the VAD); "
        "1 = one 30 s window after another, each prompted with the text before it.",
    ),
    device: shared.Device = shared.DEVICE.option(),
    kv_policy: str = shared.KV_POLICY.option(),
    kv_cross: str = shared.KV_CROSS.option(),
    compute_type: str = typer.Option(
        None,
        "--compute-type",
        show_default="profile's",
        help="Weights/compute precision: ctranslate2 int8, int8_float32, float16, float32, ...; "
        "transformers default or int8 (int8 linear layers, CPU only); whispercpp default, "
        "q8_0, q5_0 or q4_0 (weights quantized once by whisper-quantize).",
    ),
    threads: int = shared.THREADS.option(),
    initial_prompt: str = typer.Option(
        None,
        "--initial-prompt",
        metavar="TEXT",
        help="Text to prompt the first window with: names, spellings, the style wanted.",
        rich_help_panel=_DECODING,
    ),
    condition_on_previous_text: bool = typer.Option(
        None,
        "--condition-on-previous-text/--no-condition-on-previous-text",
        show_default="profile's",
        help="Prompt each window with the text before it (off: less looping, less context).",
        rich_help_panel=_DECODING,
    ),
    temperature: float = shared.TEMPERATURE.option(),
    temperature_increment_on_fallback: float = shared.TEMPERATURE_INCREMENT.option(),
    best_of: int = shared.BEST_OF.option(),
    compression_ratio_threshold: float = shared.COMPRESSION_RATIO_THRESHOLD.option(),
    logprob_threshold: float = shared.LOGPROB_THRESHOLD.option(),
    no_speech_threshold: float = shared.NO_SPEECH_THRESHOLD.option(),
    word_timestamps: bool = typer.Option(
        False,
        "--word-timestamps",
        help="Time every word (json words, word-level subtitles with the flags below).",
        rich_help_panel=_WORDS,
    ),
    highlight_words: bool = typer.Option(
        False,
        "--highlight-words",
        help="srt/vtt: underline each word as it is spoken.",
        rich_help_panel=_WORDS,
    ),
    max_line_width: int = typer.Option(
        None, "--max-line-width", help="srt/vtt: characters per line.", rich_help_panel=_WORDS
    ),
    max_line_count: int = typer.Option(
        None,
        "--max-line-count",
        help="srt/vtt: lines per cue (with --max-line-width).",
        rich_help_panel=_WORDS,
    ),
    max_words_per_line: int = typer.Option(
        None, "--max-words-per-line", help="srt/vtt: words per line.", rich_help_panel=_WORDS
    ),
    word_level_tsv: bool = typer.Option(
        False, "--word-level-tsv", help="tsv: one row per word.", rich_help_panel=_WORDS
    ),
    vad_filter: bool = typer.Option(
        False,
        "--vad-filter",
        help="Cut silence out before decoding (silero VAD); times stay the input's.",
        rich_help_panel=_VAD,
    ),
    vad_threshold: float = typer.Option(
        0.5,
        "--vad-threshold",
        help="Speech probability that counts as speech.",
        rich_help_panel=_VAD,
    ),
    vad_min_speech: float = typer.Option(
        0.0, "--vad-min-speech", help="Shorter speech (s) is dropped.", rich_help_panel=_VAD
    ),
    vad_min_silence: float = typer.Option(
        2.0, "--vad-min-silence", help="Shorter pauses (s) are kept.", rich_help_panel=_VAD
    ),
    vad_pad: float = typer.Option(
        0.4, "--vad-pad", help="Audio (s) kept either side of speech.", rich_help_panel=_VAD
    ),
    recursive: bool = typer.Option(
        False, "--recursive", "-r", help="Search folders' subfolders too.", rich_help_panel="Inputs"
    ),
    glob: list[str] = typer.Option(
        None,
        "--glob",
        "-g",
        metavar="PATTERN",
        help="Only files in folders matching PATTERN (name or relative path); "
        "'!PATTERN' excludes. Repeatable.",
        rich_help_panel="Inputs",
    ),
    output_name: str = typer.Option(
        None,
        "--output-name",
        metavar="STEM",
        show_default="stdin",
        help="Name outputs of audio read from stdin ('-') STEM.<format>.",
        rich_help_panel="Inputs",
    ),
    input_format: str = typer.Option(
        None,
        "--input-format",
        metavar="RAW",
        help="Audio on stdin is raw 16 kHz mono PCM: s16le or f32le (containers need no flag).",
        rich_help_panel="Inputs",
    ),
    files_from: str = typer.Option(
        None,
        "--files-from",
        metavar="FILE|-",
        help="Also read input paths from FILE, one per line ('-': stdin).",
        rich_help_panel="Inputs",
    ),
    jobs: int = batch_options.JOBS,
    force: bool = batch_options.FORCE,
    fail_fast: bool = batch_options.FAIL_FAST,
    json_events: bool = batch_options.JSON_EVENTS,
    cluster: str = batch_options.CLUSTER,
    ship_audio: bool = batch_options.SHIP_AUDIO,
    stats_json: Path = shared.STATS_JSON.option(),
    quiet: bool = shared.QUIET.option(),
    debug: bool = shared.DEBUG.option(),
) -> None:
    """Transcribe audio files: transcript on stdout, stats on stderr.

    With --output-dir it is a batch: the output folder mirrors the input tree, a
    manifest there makes a rerun skip what is done and redo what changed or failed.
    """
    given = dict(locals())  # first: the parameters alone
    console = stderr_console()
    setup_logging(debug)
    from kvscribe.inputs import read_files_from

    def body() -> int:
        from kvscribe.cluster.flags import cluster_run

        on_cluster = cluster_run(cluster, ship_audio, jobs, output_dir)
        listed = read_files_from(files_from) if files_from else []
        options = TranscribeOptions(
            **shared.engine_values(given),
            inputs=(*(files or ()), *listed),
            formats=parse_formats(output_format, to_dir=output_dir is not None),
            output_dir=output_dir,
            batch_size=batch_size,
            compute_type=compute_type,
            initial_prompt=initial_prompt,
            condition_on_previous_text=condition_on_previous_text,
            word_timestamps=word_timestamps,
            highlight_words=highlight_words,
            max_line_width=max_line_width,
            max_line_count=max_line_count,
            max_words_per_line=max_words_per_line,
            word_level_tsv=word_level_tsv,
            vad_filter=vad_filter,
            vad_threshold=vad_threshold,
            vad_min_speech=vad_min_speech,
            vad_min_silence=vad_min_silence,
            vad_pad=vad_pad,
            output_name=output_name,
            input_format=input_format,
            recursive=recursive,
            globs=tuple(glob or ()),
            jobs=jobs or 1,
            force=force,
            fail_fast=fail_fast,
            json_events=json_events,
        )
        if options.reads_stdin:
            return _run_stdin(options, jobs is None, on_cluster)
        if output_dir is not None:
            return _run_batch(options, jobs is None, on_cluster)
        return _run(options)

    exit_with(body, console, debug)


def _run_stdin(options: TranscribeOptions, auto_jobs: bool, on_cluster=None) -> int:
    """`kvscribe -`: the piped audio, spooled to a file named after --output-name."""
    import dataclasses

    from kvscribe.stdin import spooled

    with spooled(sys.stdin.buffer, options.output_name, options.input_format) as path:
        # The spool carries the name and the format now: the options describe a plain file.
        options = dataclasses.replace(options, inputs=(path,), output_name=None, input_format=None)
        if options.output_dir is not None:
            return _run_batch(options, auto_jobs, on_cluster)
        return _run(options)


def _run(options: TranscribeOptions) -> int:
    """Transcripts to stdout, one input after the other."""
    from kvscribe.inputs import Selection, expand
    from kvscribe.runner import Runner

    inputs = expand(options.inputs, Selection(options.recursive, options.globs))
    console = stderr_console()
    with TerminalListener(options, console, several=len(inputs) > 1) as listener:
        if all(entry.error is not None for entry in inputs):  # skip loading the model
            for entry in inputs:
                listener.file_failed(entry.path, entry.error)
            return _exit_code([entry.error for entry in inputs], len(inputs))
        stats = Runner(options).run(inputs, listener)
    _report_stats(options, stats, console)
    return _exit_code(listener.failures, len(inputs))


def _run_batch(options: TranscribeOptions, auto_jobs: bool, on_cluster=None) -> int:
    """Into --output-dir: planned against the folder's manifest, N workers here or on a Ray
    cluster (`on_cluster`, a kvscribe.cluster.flags.ClusterRun), JSON events."""
    import dataclasses
    import time

    from kvscribe import batch, capacity, models, registry
    from kvscribe.cli.batch_view import BatchView
    from kvscribe.inputs import Selection, expand

    started = time.perf_counter()
    console = stderr_console()
    inputs = expand(options.inputs, Selection(options.recursive, options.globs))
    model_bytes = 0
    if any(entry.error is None for entry in inputs):  # convert the model once, before workers
        backend_cls = registry.get(options.backend)
        model_bytes = _size(
            models.resolve(options.model, backend_cls.capabilities.model_formats).path
        )
        if auto_jobs and on_cluster is None:
            options = dataclasses.replace(options, jobs=capacity.default_jobs(model_bytes))
        warning = capacity.memory_warning(options.jobs, model_bytes)
        if warning and not options.quiet:
            console.print(f"[yellow]kvscribe: warning:[/] {warning}")
    executor = on_cluster.executor(options, model_bytes) if on_cluster else None
    view = BatchView(console, options.json_events, options.quiet, len(inputs))
    try:
        summary = batch.Batch(
            options, view, options.jobs, options.force, options.fail_fast, executor
        ).run(inputs)
    finally:
        view.close()
    if summary.fatal is not None:
        print_error(console, summary.fatal)
    if summary.stats is not None and summary.stats.done:
        _report_stats(options, summary.stats, console)
    if not options.quiet and view.several:
        console.print(view.summary(summary, time.perf_counter() - started))
    return summary.exit_code


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _report_stats(options: TranscribeOptions, stats, console) -> None:
    report = stats.to_dict()
    if options.stats_json is not None:
        atomic_write_text(options.stats_json, json.dumps(report, indent=2) + "\n")
    if not options.quiet and stats.done:
        console.print(stats_table(report))


def _exit_code(failures: list[KvscribeError], total: int) -> int:
    if not failures:
        return ExitCode.OK
    return failures[0].exit_code if total == 1 else ExitCode.SOME_FAILED
