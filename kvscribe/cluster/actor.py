"""The Ray actor of `--cluster`: one loaded model on one worker slot of a node. A plain
class here (no Ray import); kvscribe.cluster.executor makes it a Ray actor. Ray shows it
as `KvscribeWorker` (`ray list actors`) and its process as `ray::KvscribeWorker.transcribe`
while it transcribes."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from kvscribe.batch.worker import Report, Result, Task, Worker
from kvscribe.machine import openmp
from kvscribe.options import TranscribeOptions
from kvscribe.process_spools import spool_folder
from kvscribe.types import Segment


class KvscribeWorker:
    def __init__(self, options: TranscribeOptions, threads: int, env: dict[str, str]):
        # The driver's kvscribe settings (model cache, config, offline hub), so a node that
        # shares the driver's disk loads the model the driver converted, not a new copy.
        os.environ.update(env)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        openmp.wait_passively()  # a Ray worker's environment is the raylet's, not the CLI's
        self.worker = Worker(options)

    def ready(self) -> bool:
        """Answers once the model is loaded (or failed to: then every task says so): whether
        this worker's short files share batches, so the driver knows what to hand it."""
        return self.worker.shares_batches()

    def transcribe(
        self,
        tasks: list[Task],
        paths: list[str],
        audios: list[bytes] | None,
        progress: Any = None,
    ) -> list[Result]:
        """A parcel of tasks (Worker.work_parcel): their files read at `paths` (absolute:
        shared storage), or their bytes shipped by the driver, spooled to private temporary
        files under the inputs' names. `progress`: the driver's ray.util.queue.Queue, told
        how far each file's audio is."""
        report = _reporter(progress)
        if audios is None:
            return self.worker.work_parcel(tasks, report, [Path(path) for path in paths])
        with spool_folder("shipped") as folder:  # an actor killed leaves it to the next
            local = []
            for number, (task, audio) in enumerate(zip(tasks, audios, strict=True)):
                local.append(folder / str(number) / (task.path.name or "input"))
                local[-1].parent.mkdir()
                local[-1].write_bytes(audio)
            return self.worker.work_parcel(tasks, report, local, shipped=True)


def _reporter(queue: Any) -> Report:
    """Puts wait for the queue's answer, so a task's progress is queued before its result
    leaves; a lost queue must not fail the file, only stop its progress."""

    def report(task: Task, done: float, duration: float, segment: Segment | None) -> None:
        from ray.exceptions import RayError

        if queue is not None:
            with contextlib.suppress(RayError):
                queue.put_nowait((task, done, duration, segment))

    return report
