"""Voice activity: silero VAD v6 (the ONNX model faster-whisper ships) run one 32 ms window at a
time, and a hysteresis that turns its speech probabilities into utterance events."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvscribe.audio import SAMPLE_RATE
from kvscribe.errors import BackendUnavailableError
from kvscribe.voice.digital_silence import DIGITAL_SILENCE_PEAK

WINDOW = 512  # samples per VAD step (32 ms at 16 kHz), fixed by the model
_CONTEXT = 64  # samples of the previous window the model sees in front of each one
MODEL_FILE = "silero_vad_v6.onnx"
# faster-whisper ships MODEL_FILE from this release on (1.2.0 and older: silero v5 only).
FIRST_RELEASE_WITH_MODEL = "1.2.1"


def model_path(assets: Path) -> Path:
    """The silero v6 model in faster-whisper's `assets` folder; an older faster-whisper lacks
    it, which is the user's to fix (upgrade), not an internal error."""
    path = assets / MODEL_FILE
    if not path.is_file():
        raise BackendUnavailableError(
            f"{MODEL_FILE} is missing from faster-whisper's assets ({assets})",
            subject="voice activity detection",
            hint=f"pip install -U 'faster-whisper>={FIRST_RELEASE_WITH_MODEL}'",
        )
    return path


STATE = (1, 1, 128)  # the LSTM's h and c
# A run of digitally silent windows this long (5 s) puts the LSTM back in its state at a
# file's start, and its windows read 0. Over a long run of zeros the state drifts: after
# 40 s of them JFK's first 3.5 s read 0.277 on average against 0.494 at a file's start
# (benchmarks/results/silence_drift.md), and the decode never saw "ask not" (a muted
# input, a noise gate before anyone speaks). Shorter runs,
# such as a phone system's pauses between prompts (1-4 s), keep the state: starting afresh
# after 1 s changed which speech the realform recordings' chunks held (French WER 0.137 to
# 0.162, benchmarks/results/vad_reset_after.md), after 5 s only one 9.6 s pause's
# (benchmarks/results/vad_reset_5s.md).
SILENCE_RESET_SECONDS = 5.0
SILENCE_RESET_WINDOWS = -(-round(SILENCE_RESET_SECONDS * SAMPLE_RATE) // WINDOW)


def initial_state() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(STATE, dtype=np.float32), np.zeros(STATE, dtype=np.float32)


def silent_windows(rows: np.ndarray) -> np.ndarray:
    """Whether each model input row's window (its last WINDOW samples) is digital silence."""
    return np.abs(rows[:, -WINDOW:]).max(axis=1) <= DIGITAL_SILENCE_PEAK


class SilenceResets:
    """The LSTM stepped over windows in order, put back in its initial state within runs of
    SILENCE_RESET_WINDOWS or more silent windows (which read 0); a run is counted across
    calls. `step(inputs, h, c)` runs the model's stateful part on some windows' inputs and
    returns (probabilities, h, c)."""

    def __init__(self) -> None:
        self._run = 0  # silent windows in a row before the next call's first

    def run(self, step, inputs: np.ndarray, silent: np.ndarray, h, c):
        index = np.arange(silent.size)
        last_sound = np.maximum.accumulate(np.where(silent, -1, index))
        run = np.where(last_sound >= 0, index - last_sound, index + 1 + self._run)
        self._run = int(run[-1]) if run.size else self._run
        reset = run >= SILENCE_RESET_WINDOWS
        if not reset.any():
            probs, h, c = step(inputs, h, c)
            return np.asarray(probs, dtype=np.float32).reshape(-1), h, c
        found = np.zeros(silent.size, dtype=np.float32)
        edges = np.flatnonzero(np.diff(reset.astype(np.int8))) + 1
        for start, end in zip([0, *edges], [*edges, silent.size], strict=True):
            if reset[start]:
                h, c = initial_state()
            else:
                probs, h, c = step(inputs[start:end], h, c)
                found[start:end] = np.asarray(probs, dtype=np.float32).reshape(-1)
        return found, h, c


def session(model, threads: int):
    """An onnxruntime CPU session over `model` (a path, or a serialized graph) on `threads`
    intra-op threads, quiet; a missing onnxruntime or silero model is the user's to fix."""
    try:
        import onnxruntime
    except ImportError as exc:
        raise _missing(exc) from None
    options = onnxruntime.SessionOptions()
    options.inter_op_num_threads = 1
    options.intra_op_num_threads = threads
    options.log_severity_level = 4
    source = str(model) if isinstance(model, Path) else model
    return onnxruntime.InferenceSession(
        source, providers=["CPUExecutionProvider"], sess_options=options
    )


def bundled_model() -> Path:
    """The silero v6 model faster-whisper ships."""
    from kvscribe.adapters.faster_whisper import assets_folder

    try:
        return model_path(assets_folder())
    except ImportError as exc:
        raise _missing(exc) from None


def _missing(exc: ImportError) -> BackendUnavailableError:
    return BackendUnavailableError(
        f"{exc.name} is not installed",
        subject="voice activity detection",
        hint="pip install faster-whisper (it brings onnxruntime and the silero model)",
    )


class SileroVad:
    """Streaming silero VAD: keeps the LSTM state and the 64-sample context between calls,
    so feeding a stream in any chunk sizes gives the probabilities of feeding it whole."""

    def __init__(self, threads: int = 1) -> None:
        """`threads`: 1 for live mode (0.1 ms a window leaves the cores to Whisper). A whole
        file is scanned on every core by kvscribe.voice.file_scan instead."""
        self._session = session(bundled_model(), threads)
        self.reset()

    def reset(self) -> None:
        self._h, self._c = initial_state()
        self._windows = WindowBatcher()
        self._resets = SilenceResets()

    def probabilities(self, samples: np.ndarray) -> np.ndarray:
        """Speech probability of each complete window in what was fed so far (shape [n])."""
        batch = self._windows.batch(samples)
        if batch is None:
            return np.zeros(0, dtype=np.float32)
        probs, self._h, self._c = self._resets.run(
            self._step, batch, silent_windows(batch), self._h, self._c
        )
        return probs

    def _step(self, rows: np.ndarray, h, c):
        return self._session.run(None, {"input": rows, "h": h, "c": c})


class WindowBatcher:
    """Samples fed in any pieces, as the model's input rows: each complete 512-sample window
    after the previous window's last 64 samples (zeros before the first)."""

    def __init__(self) -> None:
        self._context = np.zeros(_CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)

    def batch(self, samples: np.ndarray) -> np.ndarray | None:
        """The rows ([n, 576]) of the windows `samples` completes; None when it completes none."""
        audio = np.concatenate([self._pending, samples.astype(np.float32, copy=False)])
        count = audio.size // WINDOW
        self._pending = audio[count * WINDOW :]
        if count == 0:
            return None
        windows = audio[: count * WINDOW].reshape(count, WINDOW)
        contexts = np.vstack([self._context[None], windows[:-1, -_CONTEXT:]])
        self._context = windows[-1, -_CONTEXT:].copy()
        return np.concatenate([contexts, windows], axis=1)


@dataclass(frozen=True)
class VadSettings:
    """Thresholds in probability, durations in seconds."""

    threshold: float = 0.5  # speech starts above this
    min_silence: float = 0.5  # an utterance ends after this much audio below `release`
    min_speech: float = 0.25  # shorter blips are not utterances
    pad: float = 0.2  # audio kept before the onset and after the end, as Whisper likes it
    # Whisper reads a few words poorly without what follows them: an utterance shorter than
    # `min_utterance` ends only after `join_within` of silence, else it joins the next one.
    min_utterance: float = 2.5
    join_within: float = 1.2

    @property
    def release(self) -> float:
        return max(0.01, self.threshold - 0.15)


@dataclass(frozen=True)
class VoiceEvent:
    """`start`: speech began at `sample`; `pause`: it went quiet at `sample` (may resume);
    `end`: the utterance ended at `sample` (its last speech); `discard`: it was too short."""

    kind: str
    sample: int


class VoiceDetector:
    """Hysteresis over the VAD's probabilities, in stream sample positions."""

    def __init__(self, vad: SileroVad, settings: VadSettings):
        self.vad = vad
        self.settings = settings
        self.in_speech = False
        self._windows = 0  # windows seen so far
        self._start = 0
        self._quiet_since: int | None = None

    def feed(self, samples: np.ndarray) -> list[VoiceEvent]:
        return self.feed_probabilities(self.vad.probabilities(samples))

    def feed_probabilities(self, probabilities: np.ndarray) -> list[VoiceEvent]:
        """The events of windows whose speech probabilities were computed already."""
        events: list[VoiceEvent] = []
        for prob in probabilities:
            at = self._windows * WINDOW
            self._windows += 1
            event = self._step(float(prob), at)
            if event is not None:
                events.append(event)
        return events

    def _step(self, prob: float, at: int) -> VoiceEvent | None:
        s = self.settings
        if not self.in_speech:
            if prob < s.threshold:
                return None
            self.in_speech, self._start, self._quiet_since = True, at, None
            return VoiceEvent("start", at)
        if prob >= s.threshold:
            resumed, self._quiet_since = self._quiet_since is not None, None
            return VoiceEvent("resume", at) if resumed else None
        if prob >= s.release:  # between the two thresholds: no change either way
            return None
        if self._quiet_since is None:
            self._quiet_since = at
            return VoiceEvent("pause", at)
        quiet = (at + WINDOW - self._quiet_since) / SAMPLE_RATE
        short = (self._quiet_since - self._start) / SAMPLE_RATE < s.min_utterance
        if quiet >= (max(s.min_silence, s.join_within) if short else s.min_silence):
            return self._close(self._quiet_since)
        return None

    def close(self, at: int) -> VoiceEvent | None:
        """End the utterance in progress at stream sample `at` (end of input, Ctrl-C)."""
        if not self.in_speech:
            return None
        return self._close(self._quiet_since if self._quiet_since is not None else at)

    def _close(self, end: int) -> VoiceEvent:
        self.in_speech, self._quiet_since = False, None
        kind = "end" if end - self._start >= self.settings.min_speech * SAMPLE_RATE else "discard"
        return VoiceEvent(kind, end)


def level_dbfs(samples: np.ndarray) -> float:
    """RMS level of a chunk in dB relative to full scale (-100 for silence)."""
    if samples.size == 0:
        return -100.0
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    return max(-100.0, 20 * np.log10(rms)) if rms > 0 else -100.0
