"""`kvscribe mic --live` on a real microphone: a real audio server (PulseAudio,
tests/audio_server.py) whose default source hears what is played into it, PortAudio
recording from it as from a laptop's, and Ctrl-C to stop, as a person would."""

from __future__ import annotations

import os

import pytest

from kvscribe.errors import ExitCode
from tests import audio_server
from tests.conftest import KVSCRIBE, SAMPLE, pooled_wer, run_cli

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.microphone]

RUNS = 3  # the abort this test guards against (a double free at teardown) came on a third run
# Live from the microphone, pooled over the runs, against the file offline. Under the
# suite's load a commit can come a little earlier in a pause and hear "ask not" as "asked
# not": 2 words of 66 (0.030) in a fresh clone's run on an EPYC (family 25); the unloaded
# bar of +0.02 is benchmarks/mic_live.py's (benchmarks/results/mic_live*.md).
MAX_WER_GAP = 0.05


def _need_a_server() -> None:
    problem = audio_server.missing()
    if problem:
        if os.environ.get("CI"):  # CI installs the server: a skip there would hide a gap
            pytest.fail(f"no audio server in CI: {problem}")
        pytest.skip(problem)


@pytest.fixture(scope="module")
def pulse(tmp_path_factory):
    _need_a_server()
    with audio_server.running(tmp_path_factory.mktemp("pulse")) as env:
        yield env


def test_the_microphone_hears_what_is_played_and_ctrl_c_ends_cleanly(pulse, tmp_path):
    reference = SAMPLE.with_suffix(".txt").read_text(encoding="utf-8")
    offline = run_cli(SAMPLE, "-q", "-f", "txt")
    assert offline.code == 0, offline.stderr
    pairs = []
    for number in range(RUNS):
        folder = tmp_path / f"run{number}"
        folder.mkdir()
        heard = audio_server.record_while_playing(pulse, KVSCRIBE, SAMPLE, folder)
        assert "double free" not in heard.log and "Traceback" not in heard.log, heard.log[-2000:]
        assert heard.code == 0, (number, heard.text)  # Ctrl-C finishes the sentence, exit 0
        stats = heard.stats
        assert stats["source"].startswith("microphone"), stats["source"]
        assert stats["dropped_audio_seconds"] == 0 and stats["input_overflows"] == 0
        assert stats["utterances"] >= 1 and len(stats["latencies_seconds"]) == stats["utterances"]
        assert stats["audio_seconds"] >= 11.0  # the whole clip was recorded
        pairs.append((reference, heard.text))
    offline_wer = pooled_wer([(reference, offline.stdout)] * RUNS)
    assert pooled_wer(pairs) <= offline_wer + MAX_WER_GAP, pairs


def test_listening_is_said_when_audio_arrives_not_when_the_device_opens(tmp_path):
    """A device that delivers its first block seconds after it opens (here the null sink's
    default 2 s blocks): words spoken after "listening to" must be recorded. Ctrl-C 3 s
    after the line: 3 s of audio or more."""
    _need_a_server()
    with audio_server.running(tmp_path / "pulse", slow_start=True) as env:
        heard = audio_server.record_for(env, KVSCRIBE, 3.0, tmp_path)
    assert heard.code == 0, heard.log[-2000:]
    # 3.2 s in each of two runs; 2.2 s and 2.7 s when the line came as the device opened
    assert heard.stats["audio_seconds"] >= 2.9, heard.stats["audio_seconds"]


def test_a_microphone_taken_away_ends_the_session_keeping_what_it_committed(tmp_path):
    """Unplugged mid-session: PortAudio stops calling back and says nothing, and the session
    waited for good. It now ends by itself (kvscribe.live.microphone.STALL_SECONDS) with one
    line naming the device, and what was committed before stays in the -o file."""
    from kvscribe.live.microphone import STALL_SECONDS

    _need_a_server()
    reference = SAMPLE.with_suffix(".txt").read_text(encoding="utf-8")
    with audio_server.running(tmp_path / "pulse") as env:
        heard = audio_server.record_until_unplugged(
            env, KVSCRIBE, SAMPLE, tmp_path, ends_within=STALL_SECONDS + 20
        )
    assert heard.code == ExitCode.INPUT_NOT_FOUND, heard.log[-2000:]
    assert "delivered no audio" in heard.log and "Traceback" not in heard.log, heard.log
    assert pooled_wer([(reference, heard.text)]) <= 0.1, heard.text
