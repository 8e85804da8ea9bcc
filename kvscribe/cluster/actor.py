"""The Ray actor of `--cluster`: one loaded model on one worker slot of a node. A plain
class here (no Ray import); kvscribe.cluster.executor makes it a Ray actor. Ray shows it
as `KvscribeWorker` (`ray list actors`) and its process as `ray::KvscribeWorker.transcribe`
while it transcribes."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any

from kvscribe.batch_worker import Report, Result, Task, Worker, work_guarded
from kvscribe.options import TranscribeOptions
from kvscribe.types import Segment


class KvscribeWorker:
    def __init__(self, options: TranscribeOptions, threads: int, env: dict[str, str]):
        # The driver's kvscribe settings (model cache, config, offline hub), so a node that
        # shares the driver's disk loads the model the driver converted, not a new copy.
        os.environ.update(env)
        os.environ["OMP_NUM_THREADS"] = str(threads)
        self.worker = Worker(options)

    def ready(self) -> int:
        """Answers once the model is loaded (or failed to: then every task says so)."""
        return os.getpid()

    def transcribe(
        self, task: Task, path: str, audio: bytes | None, progress: Any = None
    ) -> Result:
        """The task's file read at `path` (its absolute path: shared storage), or its bytes
        shipped by the driver, spooled to a private temporary file under the input's name.
        `progress`: the driver's ray.util.queue.Queue, told how far the audio is."""
        report = _reporter(progress)
        if audio is None:
            return work_guarded(self.worker, task, read_from=Path(path), report=report)
        with tempfile.TemporaryDirectory(prefix="kvscribe-shipped-") as folder:
            local = Path(folder) / (task.path.name or "input")
            local.write_bytes(audio)
            return work_guarded(self.worker, task, local, shipped=True, report=report)


def _reporter(queue: Any) -> Report:
    """Puts wait for the queue's answer, so a task's progress is queued before its result
    leaves; a lost queue must not fail the file, only stop its progress."""

    def report(task: Task, done: float, duration: float, segment: Segment | None) -> None:
        from ray.exceptions import RayError

        if queue is not None:
            with contextlib.suppress(RayError):
                queue.put_nowait((task, done, duration, segment))

    return report
