"""Run whisper-cli as a child process: argv only (never a shell string), segments read
from stdout as they are printed, the child's peak RSS from wait4, a deadline enforced.
Its input is a float WAV written a block at a time, so no whole-file copy is made here.

whisper-cli's quirks are turned into kvscribe errors here: it exits 0 after an
unknown flag (and after audio it cannot read), 2 when the input is missing,
3 when the model does not load, 10 when inference fails.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.audio.stream import Samples
from kvscribe.errors import (
    AudioDecodeError,
    BackendUnavailableError,
    EngineError,
    InputNotFoundError,
    KvscribeError,
    ModelNotFoundError,
    UsageError,
)
from kvscribe.machine.memtrace import maxrss_bytes

WAV_BLOCK = 30 * SAMPLE_RATE  # samples converted and written at a time
TIMEOUT_ENV = "KVSCRIBE_WHISPER_TIMEOUT"


@dataclass
class Outcome:
    """How the child ended."""

    returncode: int
    stderr: str
    peak_rss_bytes: int | None
    seconds: float
    timed_out: bool = False


def write_wav_f32(path: Path, samples: Samples) -> None:
    """Mono 16 kHz IEEE-float WAV: whisper-cli reads it without a lossy int16 round trip.
    Written a block at a time from any Samples (an array, a StreamedAudio, a Joined)."""
    with WavWriter(path) as wav:
        for start in range(0, samples.size, WAV_BLOCK):
            wav.write(samples[start : start + WAV_BLOCK])


class WavWriter:
    """A float WAV written block by block; the header gets the final size on close."""

    def __init__(self, path: Path):
        self._handle = open(path, "wb")  # noqa: SIM115  # closed by close() / __exit__
        self._handle.write(_wav_header(0))
        self.samples = 0

    def write(self, samples: np.ndarray) -> None:
        self._handle.write(np.ascontiguousarray(samples, dtype="<f4").tobytes())
        self.samples += samples.size

    def close(self) -> None:
        self._handle.seek(0)
        self._handle.write(_wav_header(self.samples))
        self._handle.close()

    def __enter__(self) -> WavWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _wav_header(samples: int) -> bytes:
    size = samples * 4
    header = b"RIFF" + struct.pack("<I", 36 + size) + b"WAVE"
    header += b"fmt " + struct.pack("<IHHIIHH", 16, 3, 1, SAMPLE_RATE, SAMPLE_RATE * 4, 4, 32)
    return header + b"data" + struct.pack("<I", size)


def execute(argv: list[str], stderr: Path, timeout: float | None) -> tuple[Outcome, list[str]]:
    """Run whisper-cli to its end: how it ended, and the lines it printed."""
    proc = WhisperProcess(argv, stderr, timeout)
    finished = False
    try:
        printed = list(proc.stdout_lines())
        outcome = proc.finish()
        finished = True
    finally:
        if not finished:
            proc.abandon()
    return outcome, printed


def timeout_for(audio_seconds: float) -> float | None:
    """A deadline generous for slow machines; KVSCRIBE_WHISPER_TIMEOUT overrides (0: none)."""
    value = os.environ.get(TIMEOUT_ENV)
    if value is None:
        return 300 + 20 * audio_seconds
    try:
        seconds = float(value)
    except ValueError:
        raise UsageError(
            f"{TIMEOUT_ENV}={value!r} is not a number", hint="give seconds, or 0 for no limit"
        ) from None
    return seconds or None


class WhisperProcess:
    """One whisper-cli run: iterate `stdout_lines()`, then `finish()`; `abandon()` if cut short.

    Only this class reaps the child (os.wait4, never Popen.poll), so its rusage is ours and
    its pid cannot be reused while a kill is pending.
    """

    def __init__(self, argv: list[str], stderr_path: Path, timeout: float | None):
        self._stderr_path = stderr_path
        self._lock = threading.Lock()
        self._timed_out = False
        self._started = time.perf_counter()
        with open(stderr_path, "wb") as stderr:
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,  # a file, not a pipe: a chatty child can never block on it
            )
        self._timer = threading.Timer(timeout, self._expire) if timeout else None
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def stdout_lines(self) -> Iterator[str]:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            yield raw.decode("utf-8", errors="replace")

    def finish(self) -> Outcome:
        """Wait for the child to exit (after stdout ended) and collect its figures."""
        returncode, peak = self._reap()
        stderr = self._stderr_path.read_text(encoding="utf-8", errors="replace")
        seconds = time.perf_counter() - self._started
        return Outcome(returncode, stderr, peak, seconds, timed_out=self._timed_out)

    def abandon(self) -> None:
        """Kill and reap the child (the reader stopped early, or was interrupted)."""
        self._kill()
        self._reap()

    def _expire(self) -> None:
        self._timed_out = True
        self._kill()

    def _kill(self) -> None:
        with self._lock:
            if self._proc.returncode is not None:
                return
            if os.name == "posix":
                os.kill(self._proc.pid, signal.SIGKILL)  # not Popen.kill: it would reap
            else:
                self._proc.kill()

    def _reap(self) -> tuple[int, int | None]:
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        if self._timer is not None:
            self._timer.cancel()
        if self._proc.returncode is not None:
            return self._proc.returncode, None
        if not hasattr(os, "wait4"):  # Windows: no per-child rusage
            return self._proc.wait(), None
        _, status, usage = os.wait4(self._proc.pid, 0)
        with self._lock:
            self._proc.returncode = os.waitstatus_to_exitcode(status)
        return self._proc.returncode, maxrss_bytes(usage.ru_maxrss)


def check_outcome(outcome: Outcome, binary: str, model: Path, audio: Path | None = None) -> None:
    """Raise the kvscribe error for a failed run; return quietly for a good one.

    `audio` names the input in errors; None leaves the subject for the caller (the runner
    names the user's file, not the temporary WAV whisper-cli was given).
    """
    error = _outcome_error(outcome, binary, model, str(audio) if audio else None)
    if error is not None:
        raise error


def _outcome_error(
    outcome: Outcome, binary: str, model: Path, audio: str | None
) -> KvscribeError | None:
    detail = _first_error_line(outcome.stderr)
    if outcome.timed_out:
        return EngineError(
            f"whisper-cli did not finish within {outcome.seconds:.0f} s and was stopped",
            subject=audio,
            hint="set KVSCRIBE_WHISPER_TIMEOUT to a larger number of seconds (0: no limit)",
        )
    if outcome.returncode < 0:
        return _signal_error(-outcome.returncode, detail, audio)
    if "error: unknown argument" in outcome.stderr or "requires value" in outcome.stderr:
        return BackendUnavailableError(
            f"{binary} does not accept kvscribe's flags ({detail})",
            subject="whispercpp",
            hint="run `kvscribe setup whisper-cpp`, or point KVSCRIBE_WHISPER_CLI "
            "to whisper.cpp 1.8 or newer",
        )
    if "error: unknown language" in outcome.stderr:  # also exit 0
        return UsageError(detail, subject="--language", hint="use a Whisper language code")
    if outcome.returncode == 3:
        return ModelNotFoundError(
            f"whisper-cli could not load this model ({detail})",
            subject=str(model),
            hint="pass a whisper.cpp ggml model, or a model name such as tiny.en to convert",
        )
    if outcome.returncode == 2:
        return InputNotFoundError("whisper-cli found no input file", subject=audio)
    if "failed to read audio" in outcome.stderr:  # whisper-cli exits 0 here
        return AudioDecodeError(
            "whisper-cli could not read this audio",
            subject=audio,
            hint="convert it to 16-bit WAV, or let kvscribe decode it",
        )
    if outcome.returncode != 0:
        return EngineError(
            f"whisper-cli failed with exit code {outcome.returncode} ({detail})",
            subject=audio,
            hint="rerun with --debug to see whisper-cli's output",
        )
    return None


def _signal_error(number: int, detail: str, audio: str | None) -> EngineError:
    name = signal.Signals(number).name
    if name == "SIGKILL":
        return EngineError(
            "whisper-cli was killed by SIGKILL (out of memory?)",
            subject=audio,
            hint="try a smaller model or --profile tiny-vram",
        )
    return EngineError(
        f"whisper-cli crashed with {name} ({detail})",
        subject=audio,
        hint="rerun with --debug to see whisper-cli's output, and check the model file",
    )


def _first_error_line(stderr: str) -> str:
    for line in stderr.splitlines():
        lowered = line.lower()
        if "error" in lowered or "failed" in lowered or "what():" in lowered:
            return line.strip()
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
