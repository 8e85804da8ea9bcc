"""Speech after a long run of digital silence (a muted input, a noise gate before anyone
speaks) keeps all its words: 40 s of zeros before JFK lost "ask" on the default path and
under --vad-filter, and "ask not" in live mode, silently, where the voice detector's state
had drifted over the zeros (kvscribe/voice/silero.py, SILENCE_RESET_WINDOWS)."""

from __future__ import annotations

import numpy as np
import pytest

from kvscribe.audio import load_audio
from tests import media
from tests.conftest import SAMPLE, SAMPLE_TEXT, run_cli, wer

pytestmark = pytest.mark.model

LEAD_IN_SECONDS = 40  # over 30 s: the default decodes the file as batched speech chunks


@pytest.fixture(scope="module")
def muted_start(tmp_path_factory):
    zeros = np.zeros(LEAD_IN_SECONDS * 16_000, dtype=np.float32)
    path = tmp_path_factory.mktemp("lead-in") / "muted start.wav"
    return media.write_wav(path, np.concatenate([zeros, load_audio(SAMPLE)]))


def _every_word_heard(text: str) -> None:
    assert "ask not" in text.lower(), text
    assert wer(SAMPLE_TEXT, text) <= 0.1, text


@pytest.mark.parametrize(
    "flags", [(), ("--vad-filter", "--batch-size", "1")], ids=["batched chunks", "vad filter"]
)
def test_a_file_run_hears_every_word_after_a_muted_start(muted_start, flags):
    result = run_cli(muted_start, "-f", "srt", *flags)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    _every_word_heard(" ".join(line for line in lines if "-->" not in line and not line.isdigit()))
    first = next(line for line in lines if "-->" in line).split(" --> ")[0]
    seconds = float(first[-6:].replace(",", "."))  # on the file's clock, padding before it
    assert first.startswith("00:00:") and LEAD_IN_SECONDS - 0.5 <= seconds <= LEAD_IN_SECONDS + 1


def test_live_mode_hears_every_word_after_a_muted_start(muted_start):
    # --step 4: a quarter of the re-decodes; the voice detector, whose state had drifted over
    # the zeros, hears the same audio
    args = ("--input", muted_start, "--as-fast-as-possible", "-q", "--step", "4")
    result = run_cli("mic", "--live", *args)
    assert result.code == 0, result.stderr
    _every_word_heard(result.stdout)
