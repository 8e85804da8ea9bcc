"""Live sessions run in the test process on a replayed file (tests/test_live_session.py,
tests/test_live_hold.py): every commit and utterance end recorded with the seconds of audio
the session had received, JFK cut into his phrases, and the file run a session is held
against."""

from __future__ import annotations

import numpy as np

from kvscribe import audio
from kvscribe.contract import DecodeRequest
from kvscribe.live.capture import Capture, FileReplay
from kvscribe.live.session import LiveSession
from kvscribe.live.stats import LiveStats
from kvscribe.live.streaming import StreamSettings
from kvscribe.options import LiveOptions
from kvscribe.runner import decode_request
from kvscribe.voice.silero import WINDOW, SileroVad, VadSettings, VoiceDetector
from tests.media import write_wav

SR = audio.SAMPLE_RATE
MAX_WER_GAP = 0.05  # one word of the 20 in JFK's phrases
STREAM = "stream.wav"  # the file a replay writes in its test's tmp_path


class Recorder:
    """Every commit and utterance end, with the seconds of audio the session had received."""

    def __init__(self, stats: LiveStats) -> None:
        self.stats = stats
        self.events: list[tuple[str, str, float]] = []

    def _at(self) -> float:
        return self.stats.audio_seconds

    def committed(self, text: str) -> None:
        self.events.append(("committed", text, self._at()))

    def tentative(self, text: str) -> None:
        pass

    def utterance_done(self, text: str, latency: float) -> None:
        self.events.append(("done", text, self._at()))

    def heard(self, level_db: float, speaking: bool) -> None:
        pass


def phrases(samples: np.ndarray) -> list[np.ndarray]:
    """The speech of `samples` split at the pauses long enough to end an utterance (VAD
    windows under the speech threshold for 0.7 s or more)."""
    speech = np.flatnonzero(SileroVad().probabilities(samples) >= VadSettings().threshold)
    breaks = np.flatnonzero(np.diff(speech) * WINDOW >= 0.7 * SR)
    firsts, lasts = speech[np.r_[0, breaks + 1]], speech[np.r_[breaks, speech.size - 1]]
    return [samples[a * WINDOW : (b + 1) * WINDOW] for a, b in zip(firsts, lasts, strict=True)]


def written(tmp_path, samples: np.ndarray):
    """`samples` as the 16-bit WAV file a session replays."""
    return write_wav(tmp_path / STREAM, samples, SR)


def replay(backend, tmp_path, samples: np.ndarray, settings: StreamSettings, **options) -> Recorder:
    """`samples` replayed live through `backend`: the suite's ct2_backend (tests/conftest.py),
    whose encoder remembers the windows it has encoded (tests/loaded.py). Replays encode the
    same buffers again (a parametrized test's other setting, the same stream in another
    test, a file run of it): about half of this module's encodes."""
    path = written(tmp_path, samples)
    live_options = LiveOptions(source=str(path), paced=False, **options)
    stats = LiveStats("ctranslate2", "cpu-laptop", "tiny.en", str(path), paced=False)
    recorder = Recorder(stats)
    session = LiveSession(
        backend,
        decode_request(live_options),
        Capture(FileReplay(path, paced=False)),
        VoiceDetector(SileroVad(), settings.vad),
        recorder,
        stats,
        settings,
    )
    session.run()
    return recorder


def file_run(backend, tmp_path) -> str:
    """The stream the session replayed, transcribed as a file run would, by the same backend:
    its 16-bit samples, not the float ones it was made of (whose reading differs on some
    kernels: "so my fellow" from the float samples, "so am I fellow" from the file's on
    MKL with AVX-512 on an AMD EPYC with AVX-512 VNNI)."""
    samples = audio.load_audio(tmp_path / STREAM)
    run = backend.transcribe(samples, DecodeRequest())
    return "".join(segment.text for segment in run.segments)
