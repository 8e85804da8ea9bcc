"""KV-cache size arithmetic, checked against the bytes of real arrays of that shape."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from kvscribe.backends.ctranslate2.report import not_applicable
from kvscribe.backends.ctranslate2.windows import WindowCounter
from kvscribe.kvcache import estimate
from kvscribe.models.ct2_file import WhisperDims

TINY_EN = WhisperDims(80, 1500, 384, 6, 4, 51864, 448, 384, 6, 4)
BASE = WhisperDims(80, 1500, 512, 8, 6, 51865, 448, 512, 8, 6)


@given(
    positions=st.integers(1, 448),
    beams=st.integers(1, 8),
    dtype=st.sampled_from(["float32", "float16"]),
)
def test_self_attention_bytes_equal_a_real_cache_of_that_shape(positions, beams, dtype):
    dims = TINY_EN
    # One K and one V per layer, shaped [beams, heads, positions, head_dim].
    cache = [
        np.empty((beams, dims.n_text_head, positions, dims.n_text_state // dims.n_text_head), dtype)
        for _ in range(2 * dims.n_text_layer)
    ]
    nbytes = np.dtype(dtype).itemsize
    assert estimate.self_attention_bytes(dims, positions, beams, nbytes) == sum(
        a.nbytes for a in cache
    )


def test_cross_attention_matches_the_measured_figures_in_design():
    # The seed's figures: tiny.en fp32 18.4 MB (measured too: docs/profiles.md), base 36.9 MB;
    # 12 KB / 24 KB per self-attention token.
    assert estimate.cross_attention_bytes(TINY_EN, 1, 4) == 18_432_000
    assert estimate.cross_attention_bytes(BASE, 1, 4) == 36_864_000
    assert estimate.self_attention_bytes(TINY_EN, 1, 1, 4) == 12_288
    assert estimate.self_attention_bytes(BASE, 1, 1, 4) == 24_576


def test_value_bytes_follow_the_activation_type():
    assert estimate.value_bytes("int8_float32") == 4 and estimate.value_bytes("int8") == 4
    assert estimate.value_bytes("int8_float16") == 2 and estimate.value_bytes("float16") == 2


def test_window_counter_counts_prompt_history_and_end_of_text():
    counter = WindowCounter(TINY_EN, conditioned=True)
    counter.add(seek=0, tokens=10)
    counter.add(seek=0, tokens=5)
    counter.add(seek=3000, tokens=300)  # second window: its prompt holds the previous 15 tokens
    counter.finish()
    assert counter.count == 2 and counter.decoded == 10 + 5 + 300 + 2
    # sot (1) + startofprev (1) + 15 previous + 300 new + eot (1)
    assert counter.peak_positions == 1 + 1 + 15 + 300 + 1


def test_window_counter_caps_the_prompt_and_ignores_history_when_unconditioned():
    conditioned = WindowCounter(BASE, conditioned=True)
    plain = WindowCounter(BASE, conditioned=False)
    for counter in (conditioned, plain):
        counter.add(0, 400)
        counter.add(3000, 20)
        counter.finish()
    assert conditioned.peak_positions == max(3 + 400 + 1, 3 + 1 + 223 + 20 + 1)
    assert plain.peak_positions == 3 + 400 + 1


def test_policy_parts_ctranslate2_cannot_honour_are_named():
    assert not_applicable("full", "full", 5) == []
    notes = not_applicable("sink=4,window=128", "shared,q8_0", 5)
    assert len(notes) == 2 and "sink=4,window=128" in notes[0] and "one copy per beam" in notes[1]
    assert "moot at beam 1" in not_applicable("full", "shared", 1)[0]
