"""Batch work on a Ray cluster (`--cluster`): one KvscribeWorker actor per worker slot
(kvscribe.cluster.capacity), files handed to idle actors in parcels (as `--jobs` hands
them: as many as a batch holds chunks to an actor whose short files share batches, else
one at a time; kvscribe.batch.executors.parcel_size), each result (the transcript and stats)
back to the driver, which alone writes outputs and the manifest (kvscribe.batch), so a
killed driver and a rerun behave as with `--jobs`.

An actor that dies (killed, out of memory, its node lost) is replaced, at most
MAX_RESTARTS times per slot, and the files it held go back to the front of the line, for
the next free actor, each at most MAX_ATTEMPTS times; then it is that file's failure. A
lost parcel's files are retried one at a time, so a file that kills its worker uses up
only its own attempts, not its parcel's good files'.
Waits are bounded: every actor lost for good, or none ready for START_SECONDS while
nothing runs, stops the batch with one line.

The actors report progress (audio done, each final segment) on a Ray queue (itself a small
actor, no CPU) that the driver drains as it polls, before each result: best effort, a lost
queue only stops the progress.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from kvscribe import profile as profiles
from kvscribe import registry
from kvscribe.batch.executors import TaskEvents, parcel_size
from kvscribe.batch.worker import Result, Task, internal_error
from kvscribe.cluster.actor import KvscribeWorker
from kvscribe.cluster.capacity import Slot, alive_nodes, plan
from kvscribe.cluster.connect import connect, first_line
from kvscribe.errors import EngineError, InputNotFoundError
from kvscribe.manifest import Fingerprint, fingerprint
from kvscribe.options import TranscribeOptions

MAX_ATTEMPTS = 3  # per file
# A shipped parcel's bytes together: short files' (a 30 s WAV is 1-6 MB); more waits for
# the next parcel, so the driver never holds many long files' bytes at once.
SHIP_PARCEL_BYTES = 64 * 2**20
MAX_RESTARTS = 3  # per worker slot
START_SECONDS = 300.0  # no actor ready and nothing running for this long: give up
POLL_SECONDS = 1.0
_ENV_PREFIXES = ("KVSCRIBE_", "HF_")  # the driver's settings the actors take along
_ENV_KEPT_HERE = ("KVSCRIBE_API_KEY",)  # the server's key: a batch worker has no use for it

_log = logging.getLogger(__name__)


class RayExecutor:
    """kvscribe.batch's Executor on a Ray cluster; connects when there is work."""

    def __init__(self, options: TranscribeOptions, address: str, ship_audio: bool, model_bytes):
        self.options = options
        self.address = address
        self.ship_audio = ship_audio
        self.model_bytes = model_bytes

    def results(self, todo: list[Task], events: TaskEvents) -> Iterator[Result]:
        ray = connect(self.address)
        try:
            per_core = registry.get(self.options.backend).capabilities.worker_per_core
            nodes = alive_nodes(ray.nodes())
            slots = plan(nodes, self.model_bytes, _wants_gpu(self.options), per_core)
            actors = _ActorFactory(ray, _for_actors(self.options))
            run = _Run(ray, actors, slots[: len(todo)], self.ship_audio, events, self.options)
            yield from run.results(todo)
        finally:
            ray.shutdown()  # disconnects; a local Ray started for this run stops with it


def _wants_gpu(options: TranscribeOptions) -> bool:
    return (options.device or profiles.load(options.profile).device) == "cuda"


def _for_actors(options: TranscribeOptions) -> TranscribeOptions:
    """The options with `--profile auto` decided here, once: every node then runs the
    profile the manifest's key records, whatever hardware it has."""
    return dataclasses.replace(options, profile=profiles.load(options.profile).name)


def actor_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The driver's kvscribe and Hugging Face settings, which the actors take along (sent as
    actor arguments: a secret they do not need stays here)."""
    return {
        name: value
        for name, value in environ.items()
        if name.startswith(_ENV_PREFIXES) and name not in _ENV_KEPT_HERE
    }


class _ActorFactory:
    def __init__(self, ray: ModuleType, options: TranscribeOptions):
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.ray = ray
        self.options = options
        self.env = actor_env(os.environ)
        self.remote = ray.remote(KvscribeWorker)
        self.strategy = NodeAffinitySchedulingStrategy

    def start(self, slot: Slot) -> Any:
        """A new actor on the slot's node (elsewhere if that node is gone: soft affinity)."""
        return self.remote.options(
            num_cpus=slot.threads,
            num_gpus=slot.gpus,
            max_restarts=0,  # a dead actor is replaced here, where its file is retried
            scheduling_strategy=self.strategy(slot.node.id, soft=True),
        ).remote(self.options, slot.threads, self.env)


@dataclass
class _Actor:
    slot: Slot
    handle: Any = None
    restarts: int = 0
    shares: bool = False  # its short files share batches (told when it is ready)


@dataclass
class Attempt:
    task: Task
    number: int = 1
    fingerprint: Fingerprint | None = None  # taken here when the audio is shipped
    alone: bool = False  # retried after its parcel was lost: in a parcel of its own


class _Run:
    def __init__(
        self,
        ray: ModuleType,
        actors: _ActorFactory,
        slots: list[Slot],
        ship: bool,
        events: TaskEvents,
        options: TranscribeOptions,
    ):
        self.ray = ray
        self.options = options  # its batch size: how many files a sharing actor takes
        self.actors = actors
        self.ship = ship
        self.events = events
        self.all: list[_Actor] = []
        self.idle: list[_Actor] = []
        # A call in flight: its actor and parcel (None: the actor's ready() call).
        self.pending: dict[Any, tuple[_Actor, list[Attempt] | None]] = {}
        self.last_loss = "no worker started"
        self.progress: Any = _progress_queue(ray)
        for slot in slots:
            self._start(_Actor(slot))

    def results(self, todo: list[Task]) -> Iterator[Result]:
        queue = deque(Attempt(task) for task in todo)
        quiet_since = time.monotonic()
        try:
            while queue or self._busy():
                while queue and self.idle:
                    actor = self.idle.pop(0)
                    parcel = self._take(queue, actor)
                    for attempt in parcel:
                        if attempt.number == 1:
                            self.events.started(attempt.task)
                    yield from self._dispatch(actor, parcel)
                if not self.pending:
                    yield _stopped(queue[0].task, f"every Ray worker was lost: {self.last_loss}")
                    return
                done, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=POLL_SECONDS)
                self._relay()  # a finished parcel's progress is queued by now
                if done:
                    quiet_since = time.monotonic()
                    yield from self._collect(done[0], queue)
                elif not self._busy() and time.monotonic() - quiet_since > START_SECONDS:
                    yield _stopped(queue[0].task, f"no Ray worker ready in {START_SECONDS:.0f} s")
                    return
        finally:
            handles = [actor.handle for actor in self.all]
            if self.progress is not None:
                handles.append(self.progress.actor)
            for handle in handles:
                with contextlib.suppress(Exception):
                    self.ray.kill(handle)

    def _take(self, queue: deque[Attempt], actor: _Actor) -> list[Attempt]:
        """The files `actor` is handed next: a parcel for an actor that shares batches."""
        size = parcel_size(self.options, len(queue), len(self.all)) if actor.shares else 1
        return take_parcel(queue, size, self.ship)

    def _busy(self) -> bool:
        return any(parcel is not None for _, parcel in self.pending.values())

    def _start(self, actor: _Actor) -> None:
        actor.handle = self.actors.start(actor.slot)
        self.all.append(actor)
        self.pending[actor.handle.ready.remote()] = (actor, None)

    def _dispatch(self, actor: _Actor, parcel: list[Attempt]) -> Iterator[Result]:
        """Hand `parcel` to `actor`; a file whose audio cannot be shipped is its Result at
        once."""
        audios = None
        if self.ship:
            audios, shipped = [], []
            for attempt in parcel:
                task = attempt.task
                try:
                    attempt.fingerprint = fingerprint(task.path, task.known)
                    audios.append(task.path.read_bytes())
                except OSError as exc:
                    yield Result(task, error=_unreadable(task, exc))
                    continue
                shipped.append(attempt)
            parcel = shipped
        if not parcel:
            self.idle.append(actor)
            return
        tasks = [attempt.task for attempt in parcel]
        paths = [os.path.abspath(task.path) for task in tasks]  # the actors' folder is not ours
        ref = actor.handle.transcribe.remote(tasks, paths, audios, self.progress)
        self.pending[ref] = (actor, parcel)

    def _collect(self, ref: Any, queue: deque[Attempt]) -> Iterator[Result]:
        actor, parcel = self.pending.pop(ref)
        errors = self.ray.exceptions
        try:
            value = self.ray.get(ref)
        except errors.RayTaskError as exc:  # the call raised (not the engine: that is a result)
            if parcel is None:
                self._lost(actor, exc)
                return
            self.idle.append(actor)
            cause = exc.cause if isinstance(exc.cause, Exception) else exc  # not the remote
            for attempt in parcel:  # traceback: its first frame is Ray's, its text pages
                yield Result(attempt.task, error=internal_error(attempt.task, cause))
            return
        except errors.RayError as exc:  # the actor, its process or its node is gone
            self._lost(actor, exc)
            if parcel is not None:
                yield from self._retry(parcel, queue)
            return
        self.idle.append(actor)
        if parcel is None:
            actor.shares = bool(value)
            return
        by_path = {result.task.path: result for result in value}
        for attempt in parcel:
            result = by_path[attempt.task.path]
            if attempt.fingerprint is not None:
                result.fingerprint = attempt.fingerprint
            yield storage_not_shared(result, actor.slot.node.address)

    def _relay(self) -> None:
        """Hand what the actors queued to the events (the driver alone drains the queue)."""
        if self.progress is None:
            return
        try:
            waiting = self.progress.qsize()
            messages = self.progress.get_nowait_batch(waiting) if waiting else []
        except self.ray.exceptions.RayError:
            _log.warning("the Ray progress queue was lost; progress is no longer shown")
            self.progress = None
            return
        for message in messages:
            self.events.progress(*message)

    def _lost(self, actor: _Actor, exc: Exception) -> None:
        self.last_loss = first_line(exc)
        self.all.remove(actor)
        with contextlib.suppress(Exception):  # only unreachable for now, it would keep its CPUs
            self.ray.kill(actor.handle)
        if actor.restarts < MAX_RESTARTS:
            _log.warning("a Ray worker on %s was lost; starting another", actor.slot.node.address)
            self._start(_Actor(actor.slot, restarts=actor.restarts + 1))
        else:
            _log.warning("a Ray worker slot on %s is given up", actor.slot.node.address)

    def _retry(self, parcel: list[Attempt], queue: deque[Attempt]) -> Iterator[Result]:
        """The lost parcel's files back to the front of the line, in their order, each to go
        alone; a file that has had MAX_ATTEMPTS fails."""
        for attempt in reversed(parcel):
            task = attempt.task
            if attempt.number >= MAX_ATTEMPTS:
                yield Result(task, error=_died_every_time(task, attempt.number))
                continue
            self.events.retrying(task, attempt.number + 1, MAX_ATTEMPTS, self.last_loss)
            queue.appendleft(Attempt(task, attempt.number + 1, attempt.fingerprint, alone=True))


def take_parcel(queue: deque, size: int, ship: bool) -> list:
    """Up to `size` attempts from the front of `queue`; shipped, no more than
    SHIP_PARCEL_BYTES of files together (the first always goes), so a long file's bytes
    still travel alone. An attempt retried after its parcel was lost goes alone."""
    parcel: list = []
    shipped = 0
    while queue and len(parcel) < size:
        if parcel and (queue[0].alone or parcel[0].alone):
            break
        if ship:
            shipped += _file_bytes(queue[0].task.path)
            if parcel and shipped > SHIP_PARCEL_BYTES:
                break
        parcel.append(queue.popleft())
    return parcel


def _file_bytes(path) -> int:
    """The file's size (0 when it cannot be read: shipping it then fails it in one line)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _progress_queue(ray: ModuleType) -> Any:
    """The actors' progress goes to the driver through this queue (an actor needing no CPU,
    so it never takes a worker slot's place)."""
    from ray.util.queue import Queue

    return Queue(actor_options={"num_cpus": 0})


def storage_not_shared(result: Result, node: str) -> Result:
    """A worker that finds no file at a path the driver reads: the nodes do not share the
    driver's storage, which "no such file (check the path)" would not tell."""
    error = result.error
    if not isinstance(error, InputNotFoundError) or error.message != "no such file":
        return result
    if not result.task.path.exists():
        return result
    result.error = InputNotFoundError(
        f"the Ray worker on {node} finds no file at this path, which this machine reads",
        subject=str(result.task.path),
        hint="mount the inputs at the same path on every node, or add --ship-audio",
    )
    return result


def _stopped(next_task: Task, why: str) -> Result:
    """A fatal Result: the batch stops; the files not yet done stay to do on a rerun."""
    error = EngineError(
        why, subject="--cluster", hint="check `ray status` and the workers' logs; rerun to resume"
    )
    return Result(next_task, error=error, fatal=True)


def _died_every_time(task: Task, attempts: int) -> EngineError:
    return EngineError(
        f"the Ray worker transcribing it was lost {attempts} times "
        "(killed, out of memory, or its node went away)",
        subject=str(task.path),
        hint="rerun to retry it; if it keeps failing, give the workers more memory",
    )


def _unreadable(task: Task, exc: OSError) -> InputNotFoundError:
    return InputNotFoundError(
        f"cannot read it to ship it to the cluster: {exc.strerror or exc}",
        subject=str(task.path),
        hint="check that it exists and is readable",
    )
