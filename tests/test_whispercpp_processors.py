"""The whispercpp backend's batch path: a batch size over 1 on audio over 30 s runs
whisper-cli's -p (parts of the audio on their own whisper states), against the real binary."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvscribe.machine.capacity import usable_cores
from kvscribe.models import resolve
from tests.conftest import SAMPLE, SAMPLE_TEXT, run_cli, wer

pytestmark = [pytest.mark.whispercpp]


@pytest.fixture(scope="module")
def jfk_66s(tmp_path_factory) -> Path:
    """66 s of speech (the sample 6 times): two parts of at least 30 s."""
    from kvscribe.audio import load_audio
    from tests import media

    path = tmp_path_factory.mktemp("jfk66") / "jfk66.wav"
    return media.encode(np.tile(load_audio(SAMPLE), 6), 16000, path, "pcm_s16le")


def _whispercpp_backend(**section):
    """The whispercpp backend on tiny.en at cpu-laptop's settings, greedy, `section` on top."""
    import dataclasses

    from kvscribe import profile, registry

    base = profile.load("cpu-laptop")
    settings = {**base.settings_for("whispercpp"), "beam_size": 1, **section}
    custom = dataclasses.replace(base, backends={**base.backends, "whispercpp": settings})
    backend = registry.get("whispercpp")(resolve("tiny.en", ("ggml",)), custom, "cpu")
    backend.load()
    return backend


def test_processors_follow_batch_size_threads_and_length(whisper_cli, tmp_path):
    from kvscribe.contract import DecodeRequest

    two = _whispercpp_backend(threads=2)
    assert two.processors_for(8, 182.0) == 2  # one part per thread
    assert two.processors_for(8, 45.0) == 1  # and per 30 s of audio
    assert two.processors_for(1, 182.0) == 1
    assert _whispercpp_backend(threads=8).processors_for(8, 100.0) == 3
    argv = two.argv_for(tmp_path / "a.wav", tmp_path / "out", DecodeRequest(), 1, 2)
    assert argv[argv.index("-t") + 1] == "1" and argv[argv.index("-p") + 1] == "2"
    assert "-p" not in two.argv_for(tmp_path / "a.wav", tmp_path / "out", DecodeRequest(), 1)


@pytest.mark.slow
def test_profile_batch_size_decodes_long_audio_on_two_processors(whisper_cli, jfk_66s):
    from kvscribe.audio import load_audio
    from kvscribe.contract import DecodeRequest

    backend = _whispercpp_backend(threads=2, batch_size=8)
    run = backend.transcribe(load_audio(jfk_66s), DecodeRequest())
    segments = list(run.segments)
    report = run.report
    assert report.batch_size == 2 and report.settings["batch size"] == "8"
    assert report.settings["processors (-p)"].startswith("2 x 1 threads")
    # Two whisper states, each printing and holding its own caches.
    assert report.kv_cross_bytes == 2 * report.engine_memory_bytes["kv cross"] > 0
    assert report.kv_self_peak_bytes == 2 * report.engine_memory_bytes["kv self"] > 0
    assert "x 2 whisper states" in report.settings["kv self allocation"]
    starts = [segment.start for segment in segments]
    assert starts == sorted(starts) and 60 < segments[-1].end <= 66.5  # both parts, in order
    assert [segment.id for segment in segments] == list(range(len(segments)))
    text = "".join(segment.text for segment in segments)
    assert wer(" ".join([SAMPLE_TEXT] * 6), text) <= 0.15


@pytest.mark.slow
def test_batch_size_one_and_short_audio_keep_one_processor(whisper_cli, jfk_66s):
    from kvscribe.audio import load_audio
    from kvscribe.contract import DecodeRequest

    backend = _whispercpp_backend(threads=2, batch_size=8)
    # Greedy: the processors are the question, not the search (beam 5 took 42 CPU s).
    run = backend.transcribe(load_audio(jfk_66s), DecodeRequest(batch_size=1, beam_size=1))
    text = "".join(segment.text for segment in run.segments)
    report = run.report
    assert report.batch_size == 1 and "processors (-p)" not in report.settings
    assert report.kv_cross_bytes == report.engine_memory_bytes["kv cross"] > 0  # one state
    assert wer(" ".join([SAMPLE_TEXT] * 6), text) <= 0.15
    short = backend.transcribe(load_audio(SAMPLE), DecodeRequest(beam_size=1))  # nothing to batch
    assert wer(SAMPLE_TEXT, "".join(segment.text for segment in short.segments)) <= 0.1
    assert short.report.batch_size == 1 and "batch size" not in short.report.settings
    assert short.report.kv_cross_bytes == short.report.engine_memory_bytes["kv cross"]


@pytest.mark.slow
def test_batch_size_flag_reaches_whisper_cli(whisper_cli, jfk_66s, tmp_path):
    stats = tmp_path / "stats.json"
    args = ("-b", "whispercpp", "--batch-size", "2", "--beam-size", "1", "-f", "txt")
    result = run_cli(jfk_66s, *args, "--stats-json", stats)
    assert result.code == 0, result.stderr
    assert wer(" ".join([SAMPLE_TEXT] * 6), result.stdout) <= 0.15
    report = json.loads(stats.read_text())
    expected = min(2, usable_cores())  # the threads kvscribe gives whisper-cli
    assert report["settings"]["batch size"] == "2"
    assert report["settings"]["processors (-p)"].startswith(f"{expected} x ")
    assert report["kv_cross_bytes"] == expected * report["engine_memory_bytes"]["kv cross"]
