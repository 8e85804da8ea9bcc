"""A run's first file opened and its speech scanned while the model loads
(kvscribe/voice/ahead.py): the decode takes that scan instead of scanning again, gets the
same probabilities a scan of its own gives, and a file that is not the one asked for, or
cannot be opened, is left to the usual path."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from kvscribe import registry
from kvscribe.audio.stream import open_streamed
from kvscribe.contract import DecodeRequest
from kvscribe.decoding import VadFilter
from kvscribe.voice import regions
from kvscribe.voice.ahead import OpenedAhead, wanted
from tests.conftest import SAMPLE, run_cli

pytestmark = pytest.mark.model

# Each test reads the long-form clip's 61.5 s head (conftest.long_form_head): past one 30 s
# window, so a long file that is scanned ahead, at a third of the whole clip's scan and decode.


def test_a_long_file_is_scanned_once_and_its_decode_takes_that_scan(monkeypatch, long_form_head):
    opened = OpenedAhead.open(long_form_head)
    assert opened is not None
    samples = opened.take(long_form_head)
    assert samples is not None and opened.seconds is not None
    scans = []
    scan = regions._scan
    monkeypatch.setattr(
        regions, "_scan", lambda audio, threads=None: scans.append(1) or scan(audio)
    )
    ahead = regions.speech_probabilities(samples)
    assert scans == []  # taken, not scanned again
    again = regions.speech_probabilities(samples)
    assert scans == [1]  # taken once only
    fresh = open_streamed(long_form_head)
    own = regions.speech_probabilities(fresh)
    fresh.close()
    assert ahead.shape == again.shape == own.shape
    assert np.allclose(ahead, own, atol=1e-5)
    samples.close()


def test_another_file_or_one_that_cannot_be_opened_is_left_to_the_usual_path(
    tmp_path, long_form_head
):
    opened = OpenedAhead.open(long_form_head)
    assert opened is not None
    assert opened.take(SAMPLE) is None  # not the file asked for: closed, nothing kept
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF not really a wave file")
    assert OpenedAhead.open(broken) is None
    assert OpenedAhead.open(tmp_path / "missing.wav") is None


def test_only_a_decode_that_reads_the_scan_asks_for_it():
    batched = registry.get("ctranslate2").capabilities
    unbatched = dataclasses.replace(batched, batched_cuts_pauses=False)
    assert wanted(batched, DecodeRequest())
    assert not wanted(batched, DecodeRequest(batch_size=1))
    assert not wanted(unbatched, DecodeRequest())
    assert wanted(unbatched, DecodeRequest(vad=VadFilter()))


@pytest.mark.slow
def test_the_cli_says_the_first_long_file_was_scanned_while_the_model_loaded(
    tmp_path, long_form_head
):
    stats = tmp_path / "stats.json"
    out = tmp_path / "out"
    # --beam-size 1: the scan is under test, not the search (batched all the same)
    options = ("-q", "-f", "txt", "--beam-size", "1", "-o", out, "--stats-json", stats)
    result = run_cli(long_form_head, *options)
    assert result.code == 0, result.stderr
    figures = json.loads(stats.read_text())
    notes = figures["notes"]
    assert any("scanned while the model loaded" in note for note in notes), notes
    assert figures["stage_seconds"]["speech chunks"] < 0.05  # the scan was already done
    assert "bridge" in (out / long_form_head.with_suffix(".txt").name).read_text()
