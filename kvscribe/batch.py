"""Batch runs into an output folder: plan against the manifest, run the work in this
process or in N worker processes (one loaded model each), record every result.

Order of effects per input: outputs are written atomically (each one whole or
absent), then the manifest record is appended and fsynced. A crash between the
two only means the input is transcribed again on the next run.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import logging
import multiprocessing
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from kvscribe import profile as profiles
from kvscribe.errors import EngineError, ExitCode, KvscribeError
from kvscribe.inputs import Input, output_bases
from kvscribe.manifest import STATE_DIR, Fingerprint, Manifest, Record, fingerprint, options_key
from kvscribe.options import TranscribeOptions, output_shaping_values
from kvscribe.stats import FileStats, RunStats, peak_rss_bytes
from kvscribe.types import Segment, Transcript

_log = logging.getLogger(__name__)

# atomic_write_text's temporary files: `.<name>.<random>.part`
_STALE_PART = re.compile(r"^\..+\.[A-Za-z0-9_]{6,}\.part$")


@dataclass(frozen=True)
class Task:
    path: Path
    base: PurePosixPath  # output path without extension, relative to the output folder
    known: Fingerprint | None  # from the manifest, so the worker hashes only what moved


@dataclass
class Result:
    task: Task
    fingerprint: Fingerprint | None = None
    stats: FileStats | None = None
    outputs: list[str] = field(default_factory=list)
    error: KvscribeError | None = None
    fatal: bool = False  # the backend cannot run at all: stop the batch
    worker_peak_rss: int | None = None
    run_info: dict | None = None  # backend/profile/model/device/settings, from the worker


class BatchListener(Protocol):
    def planned(self, todo: list[Task], skipped: list[tuple[Path, Record]]) -> None: ...
    def started(self, task: Task) -> None: ...
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
    interrupted: bool = False
    fatal: KvscribeError | None = None
    failures: list[tuple[str, int]] = field(default_factory=list)  # (one line, exit code)
    inputs: int = 0
    audio_seconds: float = 0.0
    stats: RunStats | None = None

    @property
    def exit_code(self) -> int:
        if self.fatal is not None:
            return self.fatal.exit_code
        if self.interrupted:
            return ExitCode.INTERRUPTED
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
    ):
        assert options.output_dir is not None, "a batch writes into an output folder"
        self.options = options
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
                summary.input_errors += 1
                summary.failures.append((entry.error.one_line(), entry.error.exit_code))
                self.listener.failed_input(entry)
            return summary
        key = options_key(output_settings(self.options))
        with Manifest(self.folder) as manifest:
            _remove_stale_parts(self.folder)
            todo, skipped = self._plan(inputs, manifest, key, summary)
            self.listener.planned(todo, skipped)
            try:
                self._execute(todo, manifest, key, summary)
            except KeyboardInterrupt:
                summary.interrupted = True
            manifest.compact()
        summary.not_started = len(todo) - summary.done - summary.failed
        if summary.stats is not None:
            summary.stats.finish()
        return summary

    # -- planning ------------------------------------------------------------------------

    def _plan(self, inputs: list[Input], manifest: Manifest, key: str, summary: Summary):
        bases = output_bases([entry for entry in inputs if entry.error is None])
        todo: list[Task] = []
        skipped: list[tuple[Path, Record]] = []
        for entry in inputs:
            if entry.error is not None:
                summary.input_errors += 1
                summary.failures.append((entry.error.one_line(), entry.error.exit_code))
                self.listener.failed_input(entry)
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
        jobs = min(self.jobs, len(todo))  # no idle workers (and one input runs in-process)
        results = self._in_process(todo) if jobs <= 1 else self._in_pool(todo, jobs)
        for result in results:
            if self._record(result, manifest, key, summary) and self.fail_fast:
                break
            if summary.fatal is not None:
                break

    def _in_process(self, todo: list[Task]):
        worker = _Worker(self.options, self.folder)
        for task in todo:
            self.listener.started(task)
            yield _work_guarded(worker, task)

    def _in_pool(self, todo: list[Task], jobs: int):
        threads = max(1, (os.cpu_count() or 2) // jobs)
        pool = cf.ProcessPoolExecutor(
            max_workers=jobs,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(self.options, self.folder, threads),
        )
        pending: dict[cf.Future, Task] = {}
        queue = list(reversed(todo))
        try:
            while queue or pending:
                while queue and len(pending) < jobs:  # one per worker: submitted = started
                    task = queue.pop()
                    self.listener.started(task)
                    pending[pool.submit(_work_in_worker, task)] = task
                finished, _ = cf.wait(pending, return_when=cf.FIRST_COMPLETED)
                for future in finished:
                    task = pending.pop(future)
                    try:
                        yield future.result()
                    except cf.process.BrokenProcessPool:
                        yield Result(task, error=_worker_died(), fatal=True)
                        return
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

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
            outputs=result.outputs,
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
        self.listener.finished(result)
        return failed


class _Quiet:
    """The Runner's per-segment listener: a batch reports per file, not per segment."""

    def file_started(self, source: Path, duration: float) -> None: ...
    def language(self, source: Path, language: str, probability: float | None) -> None: ...
    def segment(self, source: Path, segment: Segment) -> None: ...
    def file_done(self, source: Path, transcript: Transcript, outputs: list[Path]) -> None: ...
    def file_failed(self, source: Path, error: KvscribeError) -> None: ...


class _Worker:
    """One loaded model; transcribes tasks one at a time (in the parent, or in a worker)."""

    def __init__(self, options: TranscribeOptions, folder: Path):
        from kvscribe.runner import Runner

        self.runner = Runner(options)
        self.folder = folder
        self.info_sent = False
        self.load_error: KvscribeError | None = None
        try:
            self.runner.prepare()
        except KvscribeError as exc:
            self.load_error = exc

    def work(self, task: Task) -> Result:
        if self.load_error is not None:
            return Result(task, error=self.load_error, fatal=True)
        result = Result(task, fingerprint=fingerprint(task.path, task.known))
        try:
            stats, _, written = self.runner.transcribe_file(
                task.path, _Quiet(), self.folder / task.base
            )
        except KvscribeError as exc:
            result.error = exc
        else:
            result.stats = stats
            result.outputs = [p.relative_to(self.folder).as_posix() for p in written]
        result.worker_peak_rss = peak_rss_bytes()
        if not self.info_sent:
            self.info_sent = True
            result.run_info = _run_info(self.runner.stats)
        return result


def _run_info(stats: RunStats) -> dict:
    return {
        "backend": stats.backend,
        "profile": stats.profile,
        "model": stats.model,
        "device": stats.device,
        "settings": dict(stats.settings),
        "load_seconds": stats.load_seconds,
        "notes": list(stats.notes),
    }


_WORKER: _Worker | None = None


def _init_worker(options: TranscribeOptions, folder: Path, threads: int) -> None:
    """Runs once in each worker process: share the cores, load the model."""
    global _WORKER
    os.environ["OMP_NUM_THREADS"] = str(threads)
    _WORKER = _Worker(options, folder)


def _work_in_worker(task: Task) -> Result:
    assert _WORKER is not None
    return _work_guarded(_WORKER, task)


def _work_guarded(worker: _Worker, task: Task) -> Result:
    """`worker.work(task)`, an unexpected exception turned into this file's failure, the same
    in this process (one input) as in a worker process (--jobs N).

    The batch's one broad catch, by contract: engines (CTranslate2, torch, whisper-cli's
    parser) raise arbitrary exception types on inputs they choke on, and such a bug must fail
    one file, not the batch. KvscribeErrors are already results inside work(); Ctrl-C
    (KeyboardInterrupt) is no Exception and still stops the run."""
    try:
        return worker.work(task)
    except Exception as exc:
        _log.debug("engine failure on %s", task.path, exc_info=True)  # --debug: the traceback
        return Result(task, error=_internal_error(task, exc))


def _internal_error(task: Task, exc: Exception) -> EngineError:
    return EngineError(
        f"internal error: {type(exc).__name__}: {exc}",
        subject=str(task.path),
        hint="an engine bug: please report it, with the file; rerun to retry",
    )


def _worker_died() -> EngineError:
    return EngineError(
        "a worker process died (killed, or out of memory?)",
        subject="--jobs",
        hint="rerun to resume; fewer --jobs use less memory",
    )


def _remove_stale_parts(folder: Path) -> None:
    """Temporary files a killed run left behind (never a finished output)."""
    for root, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if d != STATE_DIR]
        for name in names:
            if _STALE_PART.match(name):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(root, name))
