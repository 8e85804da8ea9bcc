"""The Ray actor of `--cluster`: one loaded model on one worker slot of a node. A plain
class here (no Ray import); kvscribe.cluster.executor makes it a Ray actor. Ray shows it
as `KvscribeWorker` (`ray list actors`) and its process as `ray::KvscribeWorker.transcribe`
while it transcribes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from kvscribe.batch_worker import Result, Task, Worker, work_guarded
from kvscribe.options import TranscribeOptions


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

    def transcribe(self, task: Task, path: str, audio: bytes | None) -> Result:
        """The task's file read at `path` (its absolute path: shared storage), or its bytes
        shipped by the driver, spooled to a private temporary file under the input's name."""
        if audio is None:
            return work_guarded(self.worker, task, read_from=Path(path))
        with tempfile.TemporaryDirectory(prefix="kvscribe-shipped-") as folder:
            local = Path(folder) / (task.path.name or "input")
            local.write_bytes(audio)
            return work_guarded(self.worker, task, read_from=local, shipped=True)
