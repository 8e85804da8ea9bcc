"""The cache policies on numpy arrays (an engine that keeps its cache outside torch, the
ONNX graphs) against the same policies on torch tensors: the same Q8_0/Q4_0 blocks, the
same kept entries after the same appends and beam reorders, and a held-bytes figure that
an independent walk of the cache agrees with at every step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvscribe import arrays
from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.quant import dequantize, quantize
from kvscribe.kvcache.spec import parse_cross, parse_policy
from tests.kv_storage import reachable_storage_bytes

HEADS, DIM = 2, 64
POLICIES = [
    "full",
    "window=8",
    "sink=2,window=6",
    "q8_0",
    "q4_0",
    "sink=2,window=9,q8_0,residual=3",
    "window=5; q4_0@layers=odd",
]


def _blocks_of(seed: int, zeros: bool) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(scale=rng.uniform(0.01, 10), size=(3, 2, 5, DIM)).astype(np.float32)
    if zeros:
        x[0, 0, 0, :32] = 0.0  # a block of zeros: its scale is 0
        x[1, 0, 1, :32] = 1.0  # every value the largest: ties
    return x


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.booleans(), st.sampled_from(["q8_0", "q4_0"]))
def test_numpy_blocks_are_torchs_to_the_bit(seed, zeros, kind):
    x = _blocks_of(seed, zeros)
    ours, theirs = quantize(x, kind), quantize(torch.from_numpy(x), kind)
    assert isinstance(ours.data, np.ndarray) and ours.data.dtype == theirs.data.numpy().dtype
    assert np.array_equal(ours.data, theirs.data.numpy())
    assert np.array_equal(ours.scale, theirs.scale.numpy())
    back = dequantize(ours, np.float32)
    assert np.array_equal(back, dequantize(theirs, torch.float32).numpy())
    assert back.shape == x.shape


def _steps(seed: int):
    """A decode's worth of cache traffic: a 5-token prompt for one row, fanned out to 3
    beams, then single tokens with the beams reordered each step."""
    rng = np.random.default_rng(seed)
    yield "add", rng.normal(size=(1, HEADS, 5, DIM)).astype(np.float32)
    yield "rows", [0, 0, 0]
    for _ in range(14):
        yield "add", rng.normal(size=(3, HEADS, 1, DIM)).astype(np.float32)
        yield "rows", sorted(rng.integers(0, 3, size=3).tolist())


@pytest.mark.parametrize("policy", POLICIES)
def test_a_numpy_cache_keeps_what_a_torch_cache_keeps(policy):
    specs = parse_policy(policy, 2)
    ours, theirs = PolicyCache(specs), PolicyCache(specs)
    for kind, value in _steps(7):
        for a, b in zip(ours.policy_layers, theirs.policy_layers, strict=True):
            if kind == "add":
                a.add(value, -value)
                b.add(torch.from_numpy(value), torch.from_numpy(-value))
            else:
                a.reorder_cache(value)
                b.reorder_cache(torch.tensor(value))
        for a, b in zip(ours.policy_layers, theirs.policy_layers, strict=True):
            for mine, other in zip(a.past(), b.past(), strict=True):
                assert isinstance(mine, np.ndarray)
                assert np.array_equal(mine, other.numpy())
        assert ours.get_seq_length() == theirs.get_seq_length()
        assert ours.held_bytes == theirs.held_bytes == reachable_storage_bytes(ours)


@pytest.mark.parametrize("cross", ["full", "shared", "shared,q8_0", "q4_0"])
def test_numpy_cross_attention_copies_are_held_as_torchs(cross):
    rng = np.random.default_rng(3)
    projected = [
        tuple(rng.normal(size=(2, HEADS, 40, DIM)).astype(np.float32) for _ in range(2))
        for _ in range(2)
    ]
    ours, theirs = (
        CrossAttentionStore(parse_cross(cross), 3),
        CrossAttentionStore(parse_cross(cross), 3),
    )
    ours.fill_projected(projected)
    theirs.fill_projected([tuple(torch.from_numpy(p) for p in pair) for pair in projected])
    filled = ours.held_bytes
    for store in (ours, theirs):
        store.select_chunks([1])
    for layer in range(2):
        for mine, other in zip(ours.get(layer), theirs.get(layer), strict=True):
            assert np.array_equal(mine, other.numpy())
    assert ours.held_bytes == reachable_storage_bytes(ours)
    copies = 1 if "shared" in cross else 3
    assert ours.get(0)[0].shape == (copies, HEADS, 40, DIM)
    # A store that made its own copies (per beam, or quantized) drops a chunk by moving rows
    # in place: its arrays stay held, whole, until the batch ends. One sharing the encoder's
    # arrays copies the chunks it keeps, as torch's does.
    made_its_own = copies > 1 or "q" in cross
    assert ours.held_bytes == (filled if made_its_own else theirs.held_bytes)


def test_dropping_chunks_never_writes_to_arrays_a_store_shares():
    """The encoder's K/V (shared) and the views one_chunk lends for alignment are read after
    the decode: dropping chunks must copy, not move rows in place under them."""
    rng = np.random.default_rng(4)
    projected = [
        tuple(rng.normal(size=(3, HEADS, 20, DIM)).astype(np.float32) for _ in range(2))
        for _ in range(2)
    ]
    before = [tuple(part.copy() for part in pair) for pair in projected]
    shared = CrossAttentionStore(parse_cross("shared"), 4)
    shared.fill_projected(projected)
    shared.select_chunks([2])
    for pair, saved in zip(projected, before, strict=True):
        assert all(np.array_equal(a, b) for a, b in zip(pair, saved, strict=True))
    per_beam = CrossAttentionStore(parse_cross("full"), 2)
    per_beam.fill_projected(projected)
    lent = per_beam.one_chunk(0)
    per_beam.select_chunks([2])
    assert np.array_equal(lent.get(0)[0], np.repeat(projected[0][0], 2, axis=0)[:1])
    assert np.array_equal(per_beam.get(0)[0], np.repeat(projected[0][0][2:], 2, axis=0))
    per_beam.select_chunks([0])  # its own copies now: moved in place, the same values
    assert np.array_equal(per_beam.get(1)[1], np.repeat(projected[1][1][2:], 2, axis=0))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 7), st.sampled_from(["same", "fewer", "more"]))
def test_rows_moved_in_place_are_take_rows(seed, rows, count):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3, 4)).astype(np.float32)
    size = {"same": rows, "fewer": int(rng.integers(1, rows + 1)), "more": rows + 2}[count]
    index = rng.integers(0, rows, size=size)
    expected = arrays.take_rows(x, index)
    for move in (arrays.rows_reordered, arrays.rows_kept):
        assert np.array_equal(move(x.copy(), index), expected)
        on_torch = move(torch.from_numpy(x.copy()), torch.from_numpy(index))
        assert np.array_equal(on_torch.numpy(), expected)
    # A reorder keeps the block; dropping rows lets it go (rows_kept keeps it, a view).
    kept = arrays.rows_reordered(x, index)
    assert (kept.base is x or kept is x) == (size == rows)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 12), st.integers(1, 8), st.booleans())
def test_topk_over_a_vocabulary_is_torchs(seed, rows, k, masked):
    """numpy's top-k over Whisper's vocabulary (candidates from column classes) finds what
    torch.topk finds, with most of a row masked to -inf or nearly all of it."""
    rng = np.random.default_rng(seed)
    x = (rng.normal(size=(rows, 51864)) * rng.uniform(0.1, 10)).astype(np.float32)
    x[-1, [5, 50000, 51863]] = [1e4, 2e4, 3e4]  # in the first class, a middle one, the last
    if masked:
        x[:, 50257:] = -np.inf
        x[0, : 51864 - k // 2] = -np.inf  # fewer finite values than k in the first row
    values, index = arrays.topk(x, k)
    theirs = torch.from_numpy(x).topk(k, dim=-1)
    assert np.array_equal(values, theirs.values.numpy())
    finite = np.isfinite(values)
    assert np.array_equal(index[finite], theirs.indices.numpy()[finite])
    assert all(len(set(row)) == k for row in index.tolist())  # no column twice


def test_a_view_counts_its_whole_buffer():
    whole = np.zeros((4, 1000), np.float32)
    view = whole[:, :10]
    assert arrays.held_bytes([view]) == whole.nbytes == reachable_storage_bytes([view])
    assert arrays.held_bytes([view, whole]) == whole.nbytes
    assert arrays.held_bytes([arrays.owned(view)]) == view.nbytes


def test_a_numpy_draw_follows_the_probabilities():
    """The numpy sampler behind the fallback's temperature draws for a numpy engine."""
    probabilities = np.tile(np.array([[0.1, 0.6, 0.0, 0.3]], np.float32), (20000, 1))
    drawn = arrays.draw(probabilities, np.random.default_rng(1))
    counts = np.bincount(drawn, minlength=4) / len(drawn)
    assert counts[2] == 0 and np.abs(counts - [0.1, 0.6, 0.0, 0.3]).max() < 0.02
    again = arrays.draw(probabilities, np.random.default_rng(1))
    assert np.array_equal(drawn, again)


def test_numpy_search_operations_agree_with_torchs():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(3, 50)).astype(np.float32) * 4
    t = torch.from_numpy(x.copy())
    assert np.allclose(arrays.log_softmax(x), arrays.log_softmax(t).numpy(), atol=1e-5)
    assert np.allclose(arrays.logsumexp(x), arrays.logsumexp(t).numpy(), atol=1e-5)
    values, index = arrays.topk(x, 6)
    theirs = arrays.topk(t, 6)
    assert np.array_equal(index, theirs[1].numpy()) and np.allclose(values, theirs[0].numpy())
    mask = np.zeros(50, bool)
    mask[[3, 7]] = True
    arrays.mask_(x, mask, float("-inf"))
    arrays.mask_(t, torch.from_numpy(mask), float("-inf"))
    assert np.array_equal(x, t.numpy()) and np.isneginf(x[:, 3]).all()
