"""`kvscribe transcribe FILE...`: transcript on stdout, progress and stats on stderr."""

from __future__ import annotations

import json
import sys
from typing import Any

from kvscribe.atomic_file import atomic_write_text
from kvscribe.cli.parameters import option_values, takes
from kvscribe.cli.render import (
    exit_with,
    print_error,
    setup_logging,
    stats_table,
    stderr_console,
)
from kvscribe.cli.terminal import TerminalListener
from kvscribe.cli.termination import stopped_line
from kvscribe.cli.transcribe_parameters import PARAMETERS
from kvscribe.errors import ExitCode, KvscribeError
from kvscribe.option_values import check_output_dir, check_writable, parse_formats
from kvscribe.options import TranscribeOptions


@takes(PARAMETERS)
def transcribe(**given: Any) -> None:
    """Transcribe audio files: transcript on stdout, stats on stderr.

    With --output-dir it is a batch: the output folder mirrors the input tree, a
    manifest there makes a rerun skip what is done and redo what changed or failed.
    """
    console = stderr_console()
    setup_logging(given["debug"])
    exit_with(lambda: _transcribe(given), console, given["debug"])


def _transcribe(given: dict[str, Any]) -> int:
    """The command's parameters as TranscribeOptions, run to stdout, a folder or a cluster."""
    import dataclasses

    from kvscribe.audio.stdin import spooled_pipes
    from kvscribe.cluster.flags import cluster_run
    from kvscribe.inputs import read_files_from

    jobs, output_dir = given["jobs"], given["output_dir"]
    check_output_dir(output_dir)
    check_writable(output_dir, "--output-dir", folder=True)
    check_writable(given["stats_json"], "--stats-json")
    on_cluster = cluster_run(given["cluster"], given["ship_audio"], jobs, output_dir)
    listed = read_files_from(given["files_from"]) if given["files_from"] else []
    if given["files_from"] and not listed and not given["files"]:
        return _nothing_listed(given)
    options = TranscribeOptions(
        **option_values(given, TranscribeOptions)
        | {
            "inputs": (*(given["files"] or ()), *listed),
            "formats": parse_formats(given["output_format"], to_dir=output_dir is not None),
            "globs": tuple(given["glob"] or ()),
            "jobs": 1 if jobs is None else jobs,  # None: as many as fit (_run_batch)
        }
    )
    if options.reads_stdin:
        return _run_stdin(options, jobs is None, on_cluster)
    spools = spooled_pipes(
        options.inputs, options.output_name, options.input_format, output_dir is not None
    )
    with spools as inputs:
        # `kvscribe <(ffmpeg ...)`: each pipe read once; its spool carries name and format.
        options = dataclasses.replace(options, inputs=inputs, output_name=None, input_format=None)
        if output_dir is not None:
            return _run_batch(options, jobs is None, on_cluster)
        return _run(options)


def _run_stdin(options: TranscribeOptions, auto_jobs: bool, on_cluster=None) -> int:
    """`kvscribe -`: the piped audio, spooled to a file named after --output-name."""
    import dataclasses

    from kvscribe.audio.stdin import spooled

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
    from kvscribe.stats import FileStats

    inputs = expand(options.inputs, Selection(options.recursive, options.globs))
    console = stderr_console()
    with TerminalListener(options, console, several=len(inputs) > 1) as listener:
        if all(entry.error is not None for entry in inputs):  # skip loading the model
            for entry in inputs:
                listener.file_failed(entry.path, entry.error)
            failed = [FileStats(str(e.path), error=e.error.one_line()) for e in inputs]
            _report_stats(options, _nothing_transcribed(options, failed), console)
            return _exit_code([entry.error for entry in inputs], len(inputs))
        stats = Runner(options).run(inputs, listener)
    _report_stats(options, stats, console)
    return _exit_code(listener.failures, len(inputs))


def _run_batch(options: TranscribeOptions, auto_jobs: bool, on_cluster=None) -> int:
    """Into --output-dir: planned against the folder's manifest, N workers here or on a Ray
    cluster (`on_cluster`, a kvscribe.cluster.flags.ClusterRun), JSON events."""
    import dataclasses
    import time

    from kvscribe import batch, models, registry
    from kvscribe.cli.batch_view import BatchView
    from kvscribe.inputs import Selection, expand
    from kvscribe.machine import capacity

    started = time.perf_counter()
    console = stderr_console()
    inputs = expand(options.inputs, Selection(options.recursive, options.globs))
    model_bytes = 0
    if any(entry.error is None for entry in inputs):  # convert the model once, before workers
        backend_cls = registry.get(options.backend)
        model = models.resolve(options.model, backend_cls.capabilities.model_formats)
        model_bytes = model.size_bytes()
        if auto_jobs and on_cluster is None:
            jobs = capacity.default_jobs(model_bytes, backend_cls.capabilities.worker_per_core)
            options = dataclasses.replace(options, jobs=jobs)
        readable = sum(entry.error is None for entry in inputs)  # no more workers than files
        warning = capacity.memory_warning(min(options.jobs, readable), model_bytes)
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
    stats = summary.stats or _nothing_transcribed(options, summary.unstarted, started)
    if summary.stopped_by is not None:  # a script reading --stats-json sees it too
        stats.notes.append(
            f"stopped by {summary.stopped_by}: {summary.not_started} not finished (rerun to resume)"
        )
    if summary.skipped_done or summary.skipped_failed:
        stats.notes.append(
            f"{summary.skipped_done} done before and {summary.skipped_failed} failed before "
            "(unchanged): not transcribed again"
        )
    _report_stats(options, stats, console)
    if view.several and not options.quiet:
        console.print(view.summary(summary, time.perf_counter() - started))
    elif not view.several and summary.stopped_by is not None:  # no summary to say it
        sys.stderr.write(stopped_line(summary.stopped_by == "SIGTERM"))
    return summary.exit_code


def _nothing_listed(given: dict[str, Any]) -> int:
    """`find ... | kvscribe --files-from -` on a day find found nothing: nothing to do, not a
    usage error (exit 2 made a nightly script report a failure)."""
    from kvscribe.stats import RunStats

    if not given["quiet"]:
        where = "stdin" if str(given["files_from"]) == "-" else given["files_from"]
        stderr_console().print(f"kvscribe: no input files listed in {where}: nothing to do")
    if given["stats_json"] is not None:  # never left holding an earlier run's
        fields = TranscribeOptions.__dataclass_fields__
        stats = RunStats(
            given["backend"] or fields["backend"].default,
            given["profile"] or fields["profile"].default,
            given["model"] or "",
        )
        stats.finish()
        atomic_write_text(given["stats_json"], json.dumps(stats.to_dict(), indent=2) + "\n")
    return ExitCode.OK


def _nothing_transcribed(options: TranscribeOptions, failed, started: float | None = None):
    """A run that decoded nothing (every input failed, was done before, or it was stopped
    first) still has its stats, so a script reading --stats-json never reads an earlier
    run's; its wall time from `started` (time.perf_counter) where given."""
    from kvscribe.stats import RunStats

    stats = RunStats(options.backend, options.profile, options.model or "", files=list(failed))
    if started is not None:
        stats.started = started
    stats.finish()
    return stats


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
