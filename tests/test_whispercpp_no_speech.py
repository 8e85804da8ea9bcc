"""kvscribe's no-speech patch to whisper.cpp (no-speech-logits-row.patch, upstream
ggml-org/whisper.cpp#3945): the no-speech probability is read at the start token's logits
row, which follows the previous text when a window is decoded after one.

whisper.cpp 1.8.5 reads row 0 of the prompt's logits but copies out only the last row, so
in a window prompted with previous text row 0 is left over from an earlier decode: the
no-speech probability is about 0 and a window of noise after speech is decoded into a
hallucination instead of being skipped.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvscribe.audio import load_audio
from kvscribe.backends.whispercpp import patching
from tests.conftest import SAMPLE, SAMPLE_TEXT, run_cli, wer
from tests.media import write_wav
from tests.whispercpp_patches import applied_once

PATCH = "no-speech-logits-row.patch"
SPEECH_END = 12.0  # the sample is 11.0 s; nothing may start or end after this
NOISE_SECONDS = 45.0
# White noise, seeded: -50 dBFS RMS, about 100 steps of 16-bit, so no 10 ms frame is
# digital silence and kvscribe hands all of it to whisper.cpp (kvscribe/pipeline.py cuts
# only runs within a few steps of zero). Unpatched, tiny.en reads the window at 30 s as
# " to you." or " and so on." (seeds 0-3, -45 to -55 dBFS); patched, it is skipped.
NOISE_DBFS = -50.0


def _speech_then_noise(path: Path) -> Path:
    speech = load_audio(SAMPLE)
    rng = np.random.default_rng(0)
    noise = rng.standard_normal(int(NOISE_SECONDS * 16000)) * 10 ** (NOISE_DBFS / 20)
    write_wav(path, np.concatenate([speech, noise.astype(np.float32)]))
    tail = load_audio(path)[speech.size :]
    frame_peaks = np.abs(tail[: tail.size // 160 * 160]).reshape(-1, 160).max(axis=1)
    assert frame_peaks.min() > 16 / 32768  # not digital silence: whisper.cpp decodes it
    return path


@pytest.mark.slow
def test_noise_after_speech_is_skipped_in_a_window_prompted_with_previous_text(
    whisper_cli, tmp_path
):
    """Default previous-text conditioning: the window at 30 s is prompted with the JFK text
    (prompt longer than the start token), so the no-speech test reads the right row only
    with the patch."""
    audio = _speech_then_noise(tmp_path / "jfk_then_noise.wav")
    out = tmp_path / "out"
    result = run_cli(audio, "-b", "whispercpp", "-o", out, "-f", "json", "-q")
    assert result.code == 0, result.stderr
    segments = json.loads((out / "jfk_then_noise.json").read_text())["segments"]
    assert wer(SAMPLE_TEXT, " ".join(s["text"] for s in segments)) <= 0.1
    after = [(s["start"], s["end"], s["text"]) for s in segments if s["end"] > SPEECH_END]
    assert after == [], f"text decoded in the noise after the speech: {after}"
    # the binary that ran is kvscribe's build with every patch, this one included
    info = json.loads((whisper_cli.parent / "BUILD-INFO.json").read_text())
    assert info["patches"] == patching.patches_digest()


def test_the_patch_is_applied_after_the_cache_types_one():
    # both change src/whisper.cpp: this one's lines are where the first leaves them
    assert patching.PATCHES.index("kv-cache-types.patch") < patching.PATCHES.index(PATCH)
    assert PATCH in patching.patch_texts()  # shipped as package data


def test_the_patch_applies_to_the_lines_it_was_written_for(tmp_path):
    path, patched = applied_once(PATCH, tmp_path)
    assert path == "src/whisper.cpp"
    assert "state->batch.logits[i_sot] = 1;" in patched
    assert "whisper_compute_logprobs(logits_sot, n_logits, logprobs);" in patched
    assert "whisper_compute_logprobs(state->logits, n_logits, logprobs);" not in patched
