"""Live mode's capture sources one at a time: raw PCM on stdin, a file replayed at the
audio's pace or as fast as possible, a live source the session cannot keep up with, a
device that overflows, and the errors a replay meets."""

from __future__ import annotations

import io
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

from kvscribe import audio
from kvscribe.errors import AudioDecodeError, InputNotFoundError
from kvscribe.live.capture import CHUNK_SECONDS, Capture, FileReplay, PcmStdin
from kvscribe.voice.silero import SileroVad, VoiceDetector
from tests.conftest import SAMPLE

SR = audio.SAMPLE_RATE


@pytest.fixture(scope="module")
def jfk() -> np.ndarray:
    return audio.load_audio(SAMPLE)


def _drain(capture: Capture, limit: float = 30.0) -> list:
    chunks = []
    while True:
        try:
            chunk = capture.get(timeout=limit)
        except EOFError:
            return chunks
        assert chunk is not None, "capture stalled"
        chunks.append(chunk)


def test_stdin_pcm_is_decoded_exactly_even_split_mid_sample(jfk):
    pcm = (np.clip(jfk[:SR], -1, 1) * 32767).astype("<i2")

    class Trickle(io.BytesIO):
        def read(self, size=-1):  # odd-sized reads split samples across chunks
            return super().read(min(size, 777))

    capture = Capture(PcmStdin(Trickle(pcm.tobytes())))
    capture.start()
    got = np.concatenate([c.samples for c in _drain(capture)])
    np.testing.assert_array_equal(got, pcm.astype(np.float32) / 32768.0)


@pytest.mark.slow
def test_paced_replay_releases_audio_on_the_audio_clock_and_fast_does_not(tmp_path):
    clip = tmp_path / "two_seconds.wav"
    _write_wav(clip, np.zeros(2 * SR, dtype=np.float32))
    paced = Capture(FileReplay(clip, paced=True))
    paced.start()
    chunks = _drain(paced)
    assert sum(c.samples.size for c in chunks) == 2 * SR
    spread = chunks[-1].arrived - chunks[0].arrived
    assert 1.6 <= spread <= 2.6  # 20 chunks of 0.1 s, released 0.1 s apart
    fast = Capture(FileReplay(clip, paced=False))
    fast.start()
    chunks = _drain(fast)
    assert chunks[-1].arrived - chunks[0].arrived < 1.0
    assert paced.dropped_seconds == fast.dropped_seconds == 0


def test_a_live_source_the_session_does_not_keep_up_with_drops_and_counts():
    class Burst:
        label, live = "burst", True

        def run(self, emit, stopped: threading.Event) -> None:
            for index in range(50):
                emit(np.full(1600, index, dtype=np.float32))

    capture = Capture(Burst(), backlog=1.0)  # room for 10 chunks of 0.1 s
    capture.start()
    deadline = time.monotonic() + 10
    while capture.dropped_seconds < 4.0 - 1e-6 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert capture.dropped_seconds == pytest.approx(40 * CHUNK_SECONDS)
    kept = _drain(capture)
    assert [int(c.samples[0]) for c in kept] == list(range(40, 50))  # the newest audio stays


def test_audio_a_device_lost_is_reported_by_the_session_and_its_stats():
    """A microphone read too late overflows: PortAudio flags it and the audio is gone before
    kvscribe sees it (a fault the suite's audio server cannot cause: it buffers seconds for
    a stalled reader). The session counts it, the stats and the status line say so."""
    from kvscribe.cli.live import _report, live_stats_table
    from kvscribe.cli.live_view import LiveView
    from kvscribe.live.session import LiveSession
    from kvscribe.live.stats import LiveStats
    from kvscribe.live.streaming import StreamSettings

    class OverflowingDevice:
        label, live, overflows = "microphone 0: test", True, 0

        def run(self, emit, stopped: threading.Event) -> None:
            for _ in range(10):  # one second of silence: nothing to decode
                self.overflows += 1
                emit(np.zeros(1600, dtype=np.float32))

    settings = StreamSettings()
    stats = LiveStats("ctranslate2", "cpu-laptop", "tiny.en", "microphone 0: test", paced=True)
    view = LiveView(stats, None, quiet=True)
    session = LiveSession(
        None, None, Capture(OverflowingDevice()), VoiceDetector(SileroVad(), settings.vad),
        view, stats, settings,
    )  # fmt: skip
    session.run()
    report = stats.to_dict()
    assert report["input_overflows"] == 10 and report["dropped_audio_seconds"] == 0
    assert "+ 10 device overflows" in view._status().plain
    console = Console(width=200, file=io.StringIO())
    console.print(live_stats_table(report))
    shown = console.file.getvalue()
    assert "the device overflowed 10 times (length unknown)" in shown
    assert "audio was dropped" in shown
    # -q hides the figures, not the loss: one warning line (it said nothing at all).
    quiet = Console(width=200, file=io.StringIO())
    _report(SimpleNamespace(quiet=True, stats_json=None), stats, quiet)
    said = quiet.file.getvalue()
    assert said.startswith("kvscribe: warning: this machine did not keep up: 0.00 s of audio")
    assert "overflowed 10 times" in said and said.count("\n") == 1, said
    stats.input_overflows = 0
    silent = Console(width=200, file=io.StringIO())
    _report(SimpleNamespace(quiet=True, stats_json=None), stats, silent)
    assert silent.file.getvalue() == ""  # nothing lost: -q says nothing


def test_replay_errors_reach_the_session_as_one_error(tmp_path):
    """A file that is missing or not audio fails before the session (and `-o`) begins; one
    that only its decoding finds wrong (shorter than its header says) through the capture."""
    with pytest.raises(InputNotFoundError):
        FileReplay(tmp_path / "missing.wav", paced=False)
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"this is not audio at all" * 100)
    with pytest.raises(AudioDecodeError, match="not an audio"):
        FileReplay(junk, paced=False)
    cut = tmp_path / "cut.wav"
    cut.write_bytes(SAMPLE.read_bytes()[:20000])
    capture = Capture(FileReplay(cut, paced=False))
    capture.start()
    assert _drain(capture), "what the file held came first"
    with pytest.raises(AudioDecodeError, match="incomplete"):
        capture.raise_failure()


def _write_wav(path, samples: np.ndarray) -> None:
    import wave

    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(SR)
        out.writeframes((samples * 32767).astype("<i2").tobytes())


def test_mic_names_a_device_by_its_whole_name_before_a_part_of_one():
    """ALSA lists `default` beside `sysdefault` (as PortAudio shows them with PulseAudio's
    plug-ins): `--mic default` matched both, and picked neither."""
    from kvscribe.live.microphone import InputDevice, matching

    devices = [
        InputDevice(0, "sysdefault", "ALSA", 128, 48000.0, False),
        InputDevice(1, "pulse", "ALSA", 32, 44100.0, False),
        InputDevice(2, "default", "ALSA", 32, 44100.0, True),
    ]
    assert [d.index for d in matching(devices, "default")] == [2]
    assert [d.index for d in matching(devices, "DEFAULT")] == [2]
    assert [d.index for d in matching(devices, "puls")] == [1]
    assert [d.index for d in matching(devices, "def")] == [0, 2]  # a part of two: ambiguous
    assert [d.index for d in matching(devices, "0")] == [0]
