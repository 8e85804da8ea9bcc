"""Batch runs into an output folder: plan against the manifest, run the work through an
executor (this process or N worker processes: kvscribe.batch.executors; a Ray cluster:
kvscribe.cluster; one loaded model per worker), write and record every result here, in the driver.

Order of effects per input: a "writing" record naming its outputs is appended and
fsynced, the outputs are written atomically (each one whole or absent), then the final
record. A crash in between only means the input is transcribed again on the next run,
whose guard knows those files as kvscribe's (kvscribe.batch.guard). Workers only return
transcripts: the driver alone writes outputs and the manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from kvscribe import profile as profiles
from kvscribe.atomic_file import TEMP_MARKER
from kvscribe.batch.executors import Executor, TaskEvents, local_executor
from kvscribe.batch.guard import OutputGuard
from kvscribe.batch.worker import Result, Task
from kvscribe.errors import ExitCode, KvscribeError, by_sigterm
from kvscribe.inputs import Input, output_bases
from kvscribe.manifest import STATE_DIR, Manifest, Record, fingerprint, options_key
from kvscribe.options import TranscribeOptions, output_shaping_values
from kvscribe.stats import FileStats, RunStats
from kvscribe.writers import output_paths, write_outputs

__all__ = [
    "Batch",
    "BatchListener",
    "Executor",
    "Result",
    "Summary",
    "Task",
    "TaskEvents",
    "output_settings",
]

# atomic_write_text's (kvscribe.atomic_file) temporary files and Manifest.compact's:
# `.<name>.kvscribe-<random>.part`, a name no one else gives a file
_STALE_PART = re.compile(r"^\..+" + re.escape(TEMP_MARKER) + r"[A-Za-z0-9_]{6,}\.part$")


class BatchListener(TaskEvents, Protocol):
    def planned(self, todo: list[Task], skipped: list[tuple[Path, Record]]) -> None: ...
    def finished(self, result: Result) -> None: ...
    def failed_input(self, entry: Input) -> None: ...


@dataclass
class Summary:
    done: int = 0
    failed: int = 0  # transcriptions that failed in this run
    input_errors: int = 0  # inputs that could not even be started (missing, unreadable)
    skipped_done: int = 0
    skipped_failed: int = 0
    not_started: int = 0
    stopped_by: str | None = None  # "Ctrl-C" or "SIGTERM": the run was interrupted
    fatal: KvscribeError | None = None
    failures: list[tuple[str, int]] = field(default_factory=list)  # (one line, exit code)
    inputs: int = 0
    audio_seconds: float = 0.0
    stats: RunStats | None = None
    unstarted: list[FileStats] = field(default_factory=list)  # inputs failed before a worker

    @property
    def exit_code(self) -> int:
        if self.fatal is not None:
            return self.fatal.exit_code
        if self.stopped_by is not None:
            return ExitCode.TERMINATED if self.stopped_by == "SIGTERM" else ExitCode.INTERRUPTED
        if not self.failures:
            return ExitCode.OK
        return self.failures[0][1] if self.inputs == 1 else ExitCode.SOME_FAILED


def output_settings(options: TranscribeOptions) -> dict:
    """Everything that changes what an output file contains (not where, not how fast): the
    options marked as shaping outputs, with what the profile decides for them filled in."""
    profile = profiles.load(options.profile)
    settings = output_shaping_values(options)
    kv_self, kv_cross = settings.pop("kv_policy"), settings.pop("kv_cross")
    # Keys and values as manifests have always recorded them, so earlier runs still resume.
    settings.update(
        profile=profile.name,
        backend_settings=dict(profile.settings_for(options.backend)),
        kv=[kv_self or profile.kv_self, kv_cross or profile.kv_cross],
        device=options.device or profile.device,
    )
    return settings


class Batch:
    def __init__(
        self,
        options: TranscribeOptions,
        listener: BatchListener,
        jobs: int = 1,
        force: bool = False,
        fail_fast: bool = False,
        executor: Executor | None = None,  # None: this process, or `jobs` worker processes
    ):
        assert options.output_dir is not None, "a batch writes into an output folder"
        self.options = options
        self.executor = executor
        self.listener = listener
        self.jobs = jobs
        self.force = force
        self.fail_fast = fail_fast
        self.folder = options.output_dir

    def run(self, inputs: list[Input]) -> Summary:
        summary = Summary(inputs=len(inputs))
        self.started = time.perf_counter()
        if all(entry.error is not None for entry in inputs):  # nothing to record: no folder
            for entry in inputs:
                self._failed_before_start(entry, summary)
            return summary
        key = options_key(output_settings(self.options))
        with Manifest(self.folder) as manifest:
            todo, skipped = self._plan(inputs, manifest, key, summary)
            _remove_stale_parts(self.folder, todo)
            self.listener.planned(todo, skipped)
            stopped = self.fail_fast and summary.input_errors  # an input failed already
            try:
                self._execute([] if stopped else todo, manifest, key, summary)
            except KeyboardInterrupt as stop:
                summary.stopped_by = "SIGTERM" if by_sigterm(stop) else "Ctrl-C"
            manifest.compact()
        summary.not_started = len(todo) - summary.done - summary.failed
        if summary.stats is not None:
            summary.stats.files[:0] = summary.unstarted  # in the stats as they are without -o
            summary.stats.finish()
        return summary

    def _failed_before_start(self, entry: Input, summary: Summary) -> None:
        """A missing or unreadable input, or one whose outputs may not be written."""
        line = entry.error.one_line()
        summary.input_errors += 1
        summary.failures.append((line, entry.error.exit_code))
        summary.unstarted.append(FileStats(str(entry.path), error=line))
        self.listener.failed_input(entry)

    # -- planning ------------------------------------------------------------------------

    def _plan(self, inputs: list[Input], manifest: Manifest, key: str, summary: Summary):
        bases = output_bases([entry for entry in inputs if entry.error is None])
        guard = OutputGuard(self.folder, self.options.formats, inputs, manifest, self.force)
        todo: list[Task] = []
        skipped: list[tuple[Path, Record]] = []
        for entry in inputs:
            if entry.error is None:
                entry = dataclasses.replace(entry, error=guard.conflict(entry.path, bases))
            if entry.error is not None:
                self._failed_before_start(entry, summary)
                continue
            record = manifest.get(entry.path)
            task = Task(entry.path, bases[entry.path], record.fingerprint if record else None)
            reason = None if self.force else self._skip_reason(task, record, key, manifest)
            if reason is None:
                todo.append(task)
                continue
            skipped.append((entry.path, record))
            if reason == "failed":
                summary.skipped_failed += 1
                summary.failures.append((record.error or "failed", record.exit_code))
            else:
                summary.skipped_done += 1
        return todo, skipped

    def _skip_reason(
        self, task: Task, record: Record | None, key: str, manifest: Manifest
    ) -> str | None:
        """ "done" or "failed" when the recorded result still stands, else None (redo)."""
        if record is None or record.options != key or record.fingerprint is None:
            return None
        current = fingerprint(task.path, record.fingerprint)
        if current is None or current.sha256 != record.fingerprint.sha256:
            return None
        if current != record.fingerprint:  # touched, same bytes: remember the new stat
            record.fingerprint = current
            manifest.add(record)
        if record.status == "writing":  # a run died while its outputs were written
            return None
        if record.status == "failed":
            return "failed" if record.permanent_failure else None
        wanted = [f"{task.base}.{fmt}" for fmt in self.options.formats]
        if all((self.folder / out).is_file() for out in wanted):
            return "done"
        return None

    # -- execution -----------------------------------------------------------------------

    def _execute(self, todo: list[Task], manifest: Manifest, key: str, summary: Summary):
        if not todo:
            return
        executor = self.executor or local_executor(self.options, min(self.jobs, len(todo)))
        results = executor.results(todo, self.listener)
        try:
            for result in results:
                try:
                    self._write(result, manifest, key)
                    failed = self._record(result, manifest, key, summary)
                except KvscribeError as exc:  # the manifest cannot be written (a full disk)
                    summary.fatal = exc
                    break
                if (failed and self.fail_fast) or summary.fatal is not None:
                    break
        except KeyboardInterrupt as stop:  # heard here: the executor stops as if it heard it
            _throw_into(results, stop)
            raise
        finally:
            with contextlib.suppress(ValueError):  # still running on another thread: see below
                results.close()  # stops the workers now, not when the iterator is collected

    def _write(self, result: Result, manifest: Manifest, key: str) -> None:
        """Write a returned transcript's outputs (each atomically), recorded as being written
        first; a failure to write is that input's failure, with no stats, as if its
        transcription had failed."""
        transcript, result.transcript = result.transcript, None
        if transcript is None or result.error is not None:
            return
        base = self.folder / result.task.base
        options = self.options
        planned = output_paths(base.parent, base.name, options.formats)
        outputs = [path.relative_to(self.folder).as_posix() for path in planned]
        path = os.path.abspath(result.task.path)
        manifest.add(
            Record(path, result.fingerprint, key, "writing", _with_earlier(manifest, path, outputs))
        )
        try:
            written = write_outputs(
                transcript, base.parent, base.name, options.formats, options.writer_options()
            )
        except KvscribeError as exc:
            result.error, result.stats = exc, None
            return
        result.outputs = [path.relative_to(self.folder).as_posix() for path in written]

    def _record(self, result: Result, manifest: Manifest, key: str, summary: Summary) -> bool:
        """Store one result; True when it failed."""
        if result.fatal:
            summary.fatal = result.error
            return True
        if summary.stats is None and result.run_info is not None:
            summary.stats = RunStats(**result.run_info, started=self.started)
        stats = summary.stats
        failed = result.error is not None
        record = Record(
            input=os.path.abspath(result.task.path),
            fingerprint=result.fingerprint,
            options=key,
            status="failed" if failed else "done",
            outputs=_with_earlier(manifest, os.path.abspath(result.task.path), result.outputs),
            error=result.error.one_line() if failed else None,
            exit_code=result.error.exit_code if failed else 0,
            audio_seconds=result.stats.audio_seconds if result.stats else 0.0,
            seconds=result.stats.decode_seconds if result.stats else 0.0,
        )
        manifest.add(record)
        if failed:
            summary.failed += 1
            summary.failures.append((record.error, record.exit_code))
        else:
            summary.done += 1
            summary.audio_seconds += record.audio_seconds
        if stats is not None:
            stats.files.append(result.stats or FileStats(str(result.task.path), error=record.error))
            if result.stats and result.stats.report:
                stats.settings.update(result.stats.report.settings)
            stats.worker_peak_rss = max(stats.worker_peak_rss or 0, result.worker_peak_rss or 0)
            stats.notes += [note for note in result.notes if note not in stats.notes]
        self.listener.finished(result)
        return failed


def _with_earlier(manifest: Manifest, path: str, outputs: list[str]) -> list[str]:
    """`outputs` and those the input's earlier record names (another format, an earlier
    run's): files kvscribe wrote stay known as its own to replace (kvscribe.batch.guard)."""
    earlier = manifest.records.get(path)
    return list(dict.fromkeys([*(earlier.outputs if earlier else ()), *outputs]))


def _throw_into(results, stop: KeyboardInterrupt) -> None:
    """An interrupt heard while a result was written goes to the executor too, which stops
    at once as it does when it hears one itself; closed instead, it would wait for the
    files in progress. A generator another thread is still advancing refuses the throw
    ("generator already executing"): the interrupt then goes on up alone, and the command's
    exit ends the workers."""
    with contextlib.suppress(KeyboardInterrupt, StopIteration, ValueError):
        results.throw(stop)


def _remove_stale_parts(folder: Path, todo: list[Task]) -> None:
    """Temporary files a killed run left behind (never a finished output) in the folders
    this run writes to: the manifest's, and those of the inputs it transcribes (an input
    killed while its outputs were written has no record, so it is in `todo` again). Only
    kvscribe's own names, and no walk of the folder's whole tree."""
    folders = {folder / STATE_DIR, *((folder / task.base).parent for task in todo)}
    for place in folders:
        with contextlib.suppress(OSError), os.scandir(place) as entries:
            for entry in entries:
                if _STALE_PART.match(entry.name) and entry.is_file(follow_symlinks=False):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
