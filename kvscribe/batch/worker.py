"""One batch worker slot: a loaded model that transcribes tasks one at a time and returns
each transcript (small) to the batch's driver, which alone writes outputs and the manifest.

The same Worker runs in the driver's process (one input, --jobs 1), in a spawned worker
process (--jobs N) and in a Ray actor (--cluster, kvscribe.cluster).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kvscribe import interrupts
from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Samples, open_streamed
from kvscribe.chunking import MAX_SECONDS
from kvscribe.errors import EngineError, KvscribeError
from kvscribe.machine.memtrace import peak_rss_bytes
from kvscribe.manifest import Fingerprint, fingerprint
from kvscribe.options import TranscribeOptions
from kvscribe.stats import FileStats, RunStats
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
    notes: tuple[str, ...] = ()  # the worker's run notes so far (the first result's may lack some)


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

    def __init__(self, options: TranscribeOptions, first: Path | None = None):
        """`first`: the file this worker will take first, if known, opened while it loads."""
        from kvscribe.runner import Runner

        self.runner = Runner(options)
        self.info_sent = False
        self.load_error: KvscribeError | None = None
        try:
            self.runner.prepare(first)
        except KvscribeError as exc:
            self.load_error = exc

    def shares_batches(self) -> bool:
        """Whether this worker's short files share batches (work_parcel)."""
        return self.load_error is None and self.runner.shares_batches()

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
        return self._transcribed(result, source, report)

    def work_parcel(
        self,
        tasks: list[Task],
        report: Report = _unreported,
        sources: list[Path] | None = None,
        shipped: bool = False,
    ) -> list[Result]:
        """Each of `tasks` transcribed: where the backend shares batches, the short files
        (at most 30 s) side by side (kvscribe.runner.Runner.transcribe_together), the rest
        one at a time. Each input still fails alone: a file that cannot be opened fails
        before the shared decode, and a shared decode that fails is done again one file at
        a time, so the file it choked on is the one that fails. `sources`: where each task's
        file is read (as `work`'s `read_from`; `shipped`: local copies)."""
        sources = sources or [task.path for task in tasks]
        if not self.shares_batches():
            return [
                work_guarded(self, task, source, shipped, report)
                for task, source in zip(tasks, sources, strict=True)
            ]
        results: list[Result] = []
        short: list[_Opened] = []
        for task, source in zip(tasks, sources, strict=True):
            result = Result(task)
            samples = _opened(result, source, shipped, self.runner.opened_ahead(source))
            if samples is None:
                results.append(self._finished(result))
            elif _is_short(samples):
                short.append(_Opened(result, source, samples))
            else:
                results.append(self._alone(_Opened(result, source, samples), report))
        return results + self._together(short, report)

    def _together(self, short: list[_Opened], report: Report) -> list[Result]:
        if not short:
            return []
        try:
            sources, opened = [one.source for one in short], [one.samples for one in short]
            relays = _Relays({one.source: one.result.task for one in short}, report)
            done = self.runner.transcribe_together(sources, opened, relays)
        except Exception as exc:  # by contract (work_guarded): each file retried alone
            interrupts.raise_if_behind(exc)
            _log.debug("shared decode failed; decoding its files one at a time", exc_info=True)
            return [self._alone(_Opened(one.result, one.source), report) for one in short]
        finally:
            for one in short:
                one.samples.close()
        for one, (stats, transcript) in zip(short, done, strict=True):
            stats.source = transcript.source = str(one.result.task.path)
            one.result.stats, one.result.transcript = stats, transcript
        return [self._finished(one.result) for one in short]

    def _alone(self, one: _Opened, report: Report) -> Result:
        """`one`'s task transcribed alone (from its samples when opened already), an
        unexpected exception its failure, as work_guarded makes it."""
        try:
            return self._transcribed(one.result, one.source, report, one.samples)
        except Exception as exc:  # by contract, as in work_guarded
            one.result.error = _unexpected(one.result.task, exc, "engine failure on")
            return self._finished(one.result)

    def _transcribed(
        self, result: Result, source: Path, report: Report, samples: Samples | None = None
    ) -> Result:
        """`result` with `source` transcribed (its task's file, perhaps by another name). A
        short file is decoded as a shared batch's file would be, alone in its batch: its
        text does not hang on which files a run gave it for company."""
        task = result.task
        try:
            if samples is None:
                samples = self.runner.opened_ahead(source) or open_streamed(source)
            if self.runner.shares_batches() and _is_short(samples):
                with contextlib.closing(samples):
                    [(stats, transcript)] = self.runner.transcribe_together(
                        [source], [samples], _Relay(task, report)
                    )
            else:
                stats, transcript, _ = self.runner.transcribe_file(
                    source, _Relay(task, report), None, samples
                )
        except KvscribeError as exc:
            result.error = _renamed(exc, source, task.path)
        else:
            stats.source = transcript.source = str(task.path)
            result.stats, result.transcript = stats, transcript
        return self._finished(result)

    def _finished(self, result: Result) -> Result:
        """`result` with this worker's peak memory, and the run's facts on its first one."""
        result.worker_peak_rss = peak_rss_bytes()
        assert self.runner.stats is not None  # set by prepare()
        result.notes = tuple(self.runner.stats.notes)
        if not self.info_sent:
            self.info_sent = True
            result.run_info = run_info(self.runner.stats)
        return result


@dataclass
class _Opened:
    """A parcel's file: its result so far, where it is read, and its audio once opened."""

    result: Result
    source: Path
    samples: Samples | None = None


def _opened(
    result: Result, source: Path, shipped: bool, ahead: Samples | None = None
) -> Samples | None:
    """`result`'s file opened from `source` (scanned whole; `ahead`: opened already) and
    fingerprinted (unless `shipped`: the driver took it), or None with its error in
    `result`: an unexpected exception too, as work_guarded makes it, so one file fails, not
    its parcel."""
    samples = ahead
    try:
        samples = samples or open_streamed(source)
        if not shipped:
            result.fingerprint = fingerprint(source, result.task.known)
        return samples
    except KvscribeError as exc:
        result.error = _renamed(exc, source, result.task.path)
    except Exception as exc:  # by contract, as in work_guarded
        result.error = _unexpected(result.task, exc, "failure opening")
    if samples is not None:
        samples.close()
    return None


def _is_short(samples: Samples) -> bool:
    """Whether the audio fits one window (a long file's chunks fill batches by themselves)."""
    return samples.size <= MAX_SECONDS * SAMPLE_RATE


class _Relays:
    """The Runner's listener for files decoded together: each file's progress to `report`,
    as a _Relay per task would (files are told apart by the path they are read from)."""

    def __init__(self, tasks: dict[Path, Task], report: Report):
        self.relays = {source: _Relay(task, report) for source, task in tasks.items()}

    def file_started(self, source: Path, duration: float) -> None:
        self.relays[source].file_started(source, duration)

    def language(self, source: Path, language: str, probability: float | None) -> None: ...

    def segment(self, source: Path, segment: Segment) -> None:
        self.relays[source].segment(source, segment)


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
        return Result(task, error=_unexpected(task, exc, "engine failure on"))


def _unexpected(task: Task, exc: Exception, doing: str) -> EngineError:
    """An unexpected exception as `task`'s failure, its traceback kept for --debug. An error
    a cleanup raised while Ctrl-C or SIGTERM went up is that stop, raised instead
    (kvscribe.interrupts.behind): taken for a failed file, the run went on decoding."""
    interrupts.raise_if_behind(exc)
    _log.debug("%s %s", doing, task.path, exc_info=True)
    return internal_error(task, exc)


def internal_error(task: Task, exc: Exception) -> EngineError:
    return EngineError(
        f"internal error: {type(exc).__name__}: {exc}",
        subject=str(task.path),
        hint="an engine bug: please report it, with the file; rerun to retry",
    )
