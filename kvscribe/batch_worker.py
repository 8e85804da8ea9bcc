"""One batch worker slot: a loaded model that transcribes tasks one at a time and returns
each transcript (small) to the batch's driver, which alone writes outputs and the manifest.

The same Worker runs in the driver's process (one input, --jobs 1), in a spawned worker
process (--jobs N) and in a Ray actor (--cluster, kvscribe.cluster).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing.queues
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kvscribe.errors import EngineError, KvscribeError
from kvscribe.manifest import Fingerprint, fingerprint
from kvscribe.options import TranscribeOptions
from kvscribe.stats import FileStats, RunStats, peak_rss_bytes
from kvscribe.types import Segment, Transcript

_log = logging.getLogger(__name__)


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
    transcript: Transcript | None = None  # for the driver to write; dropped once written
    outputs: list[str] = field(default_factory=list)
    error: KvscribeError | None = None
    fatal: bool = False  # the backend cannot run at all: stop the batch
    worker_peak_rss: int | None = None
    run_info: dict | None = None  # backend/profile/model/device/settings, from the worker


# How a worker tells the driver how far it is through a task: (task, audio seconds done, the
# file's audio seconds, the segment that got it there or None when its decoding begins).
Report = Callable[[Task, float, float, Segment | None], None]


def _unreported(task: Task, done: float, duration: float, segment: Segment | None) -> None: ...


class _Relay:
    """The Runner's listener in a batch: the audio done and each final segment go to `report`
    (the executor's way back to the driver's view); results and errors go back as the Result."""

    def __init__(self, task: Task, report: Report):
        self.task = task
        self.report = report
        self.duration = 0.0

    def file_started(self, source: Path, duration: float) -> None:
        self.duration = duration
        self.report(self.task, 0.0, duration, None)

    def language(self, source: Path, language: str, probability: float | None) -> None: ...

    def segment(self, source: Path, segment: Segment) -> None:
        # The view shows times and text: tokens and words would only weigh on the pipe.
        light = dataclasses.replace(segment, tokens=(), words=())
        self.report(self.task, min(segment.end, self.duration), self.duration, light)

    def file_done(self, source: Path, transcript: Transcript, outputs: list[Path]) -> None: ...
    def file_failed(self, source: Path, error: KvscribeError) -> None: ...


class Worker:
    """One loaded model; a load error is kept and returned as every task's fatal result."""

    def __init__(self, options: TranscribeOptions):
        from kvscribe.runner import Runner

        self.runner = Runner(options)
        self.info_sent = False
        self.load_error: KvscribeError | None = None
        try:
            self.runner.prepare()
        except KvscribeError as exc:
            self.load_error = exc

    def work(
        self,
        task: Task,
        read_from: Path | None = None,
        shipped: bool = False,
        report: Report = _unreported,
    ) -> Result:
        """Transcribe `task.path`, or `read_from`: the same file by another name (absolute, on
        a cluster node) or, `shipped`, a local copy of its bytes (then the driver takes the
        fingerprint). `read_from` is read, never named: results and errors name `task.path`.
        `report` hears how far the audio is, segment by segment."""
        if self.load_error is not None:
            return Result(task, error=self.load_error, fatal=True)
        source = read_from or task.path
        result = Result(task, fingerprint=None if shipped else fingerprint(source, task.known))
        try:
            stats, transcript, _ = self.runner.transcribe_file(source, _Relay(task, report), None)
        except KvscribeError as exc:
            result.error = _renamed(exc, source, task.path)
        else:
            stats.source = transcript.source = str(task.path)
            result.stats, result.transcript = stats, transcript
        result.worker_peak_rss = peak_rss_bytes()
        if not self.info_sent:
            self.info_sent = True
            assert self.runner.stats is not None  # set by prepare()
            result.run_info = run_info(self.runner.stats)
        return result


def _renamed(error: KvscribeError, read: Path, named: Path) -> KvscribeError:
    """`error` naming `named` wherever it named the local copy `read`."""
    if read != named:
        error.message = error.message.replace(str(read), str(named))
        if error.subject is not None:
            error.subject = error.subject.replace(str(read), str(named))
    return error


def run_info(stats: RunStats) -> dict:
    return {
        "backend": stats.backend,
        "profile": stats.profile,
        "model": stats.model,
        "device": stats.device,
        "settings": dict(stats.settings),
        "load_seconds": stats.load_seconds,
        "notes": list(stats.notes),
    }


def work_guarded(
    worker: Worker,
    task: Task,
    read_from: Path | None = None,
    shipped: bool = False,
    report: Report = _unreported,
) -> Result:
    """`worker.work(task)`, an unexpected exception turned into this file's failure, the same
    in the driver (one input), in a worker process (--jobs N) and in a Ray actor (--cluster).

    The batch's one broad catch, by contract: engines (CTranslate2, torch, whisper-cli's
    parser) raise arbitrary exception types on inputs they choke on, and such a bug must fail
    one file, not the batch. KvscribeErrors are already results inside work(); Ctrl-C
    (KeyboardInterrupt) is no Exception and still stops the run."""
    try:
        return worker.work(task, read_from, shipped, report)
    except Exception as exc:
        _log.debug("engine failure on %s", task.path, exc_info=True)  # --debug: the traceback
        return Result(task, error=internal_error(task, exc))


def internal_error(task: Task, exc: Exception) -> EngineError:
    return EngineError(
        f"internal error: {type(exc).__name__}: {exc}",
        subject=str(task.path),
        hint="an engine bug: please report it, with the file; rerun to retry",
    )


# -- a spawned worker process (--jobs N) -------------------------------------------------

_WORKER: Worker | None = None
_PROGRESS: multiprocessing.queues.SimpleQueue | None = None


def init_process(
    options: TranscribeOptions, threads: int, progress: multiprocessing.queues.SimpleQueue
) -> None:
    """Runs once in each worker process: share the cores, load the model, keep the queue
    that carries progress to the driver (kvscribe.batch.ProcessPool drains it)."""
    global _WORKER, _PROGRESS
    os.environ["OMP_NUM_THREADS"] = str(threads)
    _PROGRESS = progress
    _WORKER = Worker(options)


def work_in_process(task: Task) -> Result:
    assert _WORKER is not None
    return work_guarded(_WORKER, task, report=_send_progress)


def _send_progress(task: Task, done: float, duration: float, segment: Segment | None) -> None:
    """A SimpleQueue's put is written to the pipe before it returns (no feeder thread), so
    a task's progress is there before its result: the driver shows them in that order."""
    assert _PROGRESS is not None
    with contextlib.suppress(OSError):  # the driver is gone: the work is moot, not failed
        _PROGRESS.put((task, done, duration, segment))
