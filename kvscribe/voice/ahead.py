"""A run's first file opened, and its speech scanned, while the model loads.

Loading the engine (tiny.en on CTranslate2: about 0.12 s on 2 cores, from the cache's int8
copy; 0.25-0.3 s before it) and the VAD's scan of a long file (0.19 s for 6 minutes of
audio on both cores, kvscribe/voice/file_scan.py; 0.35 s on one: benchmarks/results/vad_scan.md)
each stand between the command and its first decode. Side by side (the scan on threads of
its own, beside the load), the decode starts sooner. Nothing else reads the file until the
scan has finished (`take` waits), so the file's decoder is never read from two threads.
Only a long file is scanned, and only for a run whose decode reads the scan (`wanted`); a
file that cannot be opened here is simply opened again later, where its error is
reported as usual.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kvscribe import worker_threads
from kvscribe.audio.mel import SAMPLES_PER_WINDOW
from kvscribe.audio.stream import StreamedAudio, open_streamed
from kvscribe.contract import DecodeRequest
from kvscribe.errors import KvscribeError


def wanted(capabilities, request: DecodeRequest) -> bool:
    """Whether a long file's decode reads the VAD's scan: batched chunks cut at its pauses,
    or --vad-filter."""
    batched = capabilities.batched_cuts_pauses and request.batch_size != 1
    return batched or request.vad is not None


class OpenedAhead:
    """`path` opened and, when it is long, its speech probabilities being computed
    (kvscribe.voice.regions.scan_ahead) on a thread of its own."""

    def __init__(self, path: Path, samples: StreamedAudio):
        self.path, self.samples = path, samples
        self.seconds: float | None = None  # how long the scan took, once it has run
        self._failed = False
        self._thread: threading.Thread | None = None
        if samples.size > SAMPLES_PER_WINDOW:  # one window is never cut into chunks
            self._thread = threading.Thread(target=self._scan, name="kvscribe-scan", daemon=True)
            self._thread.start()

    @classmethod
    def open(cls, path: Path) -> OpenedAhead | None:
        try:
            return cls(path, open_streamed(path))
        except KvscribeError:
            return None

    def _scan(self) -> None:
        from kvscribe.voice.regions import scan_ahead

        started = time.perf_counter()
        try:
            scan_ahead(self.samples)
        except Exception:  # read again where the error is reported as usual
            self._failed = True
        self.seconds = time.perf_counter() - started

    def take(self, path: Path) -> StreamedAudio | None:
        """The opened file, once its scan is done, if it is `path`; else (or when the scan
        failed) None, and the file is closed."""
        if self._thread is not None:
            worker_threads.join(self._thread)
        if path == self.path and not self._failed:
            return self.samples
        self.close()
        return None

    def close(self) -> None:
        """Nothing will read the file: wait for the scan, then close it."""
        if self._thread is not None:
            worker_threads.join(self._thread)
        self.samples.close()
