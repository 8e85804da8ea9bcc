"""Cache policies on random tensors: exactness while short, exact slices after trimming,
absolute positions, quantization bounds, and byte figures equal to the tensors'."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from transformers.cache_utils import DynamicLayer  # noqa: E402  (the reference)

from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache  # noqa: E402
from kvscribe.kvcache.layers import HalfLayer, KVLayer, make_layer  # noqa: E402
from kvscribe.kvcache.quant import dequantize, quantize  # noqa: E402
from kvscribe.kvcache.spec import CrossSpec, LayerSpec, parse_cross, parse_policy  # noqa: E402

pytestmark = [pytest.mark.transformers]

HEADS, DIM = 2, 64
chunks = st.lists(st.integers(1, 6), min_size=1, max_size=25)


def _feed(layer, sizes, seed=0):
    """Update `layer` with random K/V chunks; yield (new keys, returned keys, returned values)."""
    generator = torch.Generator().manual_seed(seed)
    for size in sizes:
        keys = torch.randn(1, HEADS, size, DIM, generator=generator)
        values = torch.randn(1, HEADS, size, DIM, generator=generator)
        yield keys, values, *layer.update(keys, values)


@settings(max_examples=60, deadline=None)
@given(sizes=chunks, sink=st.integers(0, 4), window=st.integers(1, 40))
def test_policy_equals_full_cache_while_shorter_than_its_window(sizes, sink, window):
    policy = KVLayer(LayerSpec(sink=sink, window=window))
    full = DynamicLayer()
    seen = 0
    for (keys, values, got_k, got_v), size in zip(_feed(policy, sizes), sizes, strict=True):
        want_k, want_v = full.update(keys, values)
        if seen < sink + window:  # nothing trimmed yet when this step started
            assert torch.equal(got_k, want_k) and torch.equal(got_v, want_v)
        seen += size


@settings(max_examples=60, deadline=None)
@given(sizes=chunks, sink=st.integers(0, 4), window=st.integers(1, 20))
def test_trimmed_cache_holds_exactly_the_sink_and_window_slices(sizes, sink, window):
    policy = KVLayer(LayerSpec(sink=sink, window=window))
    history_k = torch.empty(1, HEADS, 0, DIM)
    for keys, _values, got_k, _ in _feed(policy, sizes):
        seen_before = history_k.shape[2]
        sinks = history_k[:, :, : min(sink, seen_before)]
        recent_from = max(min(sink, seen_before), seen_before - window)
        expected = torch.cat([sinks, history_k[:, :, recent_from:], keys], dim=2)
        assert torch.equal(got_k, expected)
        history_k = torch.cat([history_k, keys], dim=2)
        # Positions stay absolute; masks describe what is stored.
        assert policy.get_seq_length() == history_k.shape[2]
        stored = policy.stored
        assert stored == min(history_k.shape[2], sink + window) or stored == history_k.shape[2]


@settings(max_examples=40, deadline=None)
@given(sizes=chunks, kind=st.sampled_from(["q8_0", "q4_0"]), residual=st.integers(0, 8))
def test_quantized_layer_stays_within_the_format_bound(sizes, kind, residual):
    policy = KVLayer(LayerSpec(quant=kind, residual=residual))
    history = torch.empty(1, HEADS, 0, DIM)
    for keys, _values, got_k, _ in _feed(policy, sizes):
        history = torch.cat([history, keys], dim=2)
        blocks = history.reshape(1, HEADS, -1, DIM // 32, 32)
        amax = blocks.abs().amax(-1, keepdim=True)
        error = (got_k - history).abs().reshape(blocks.shape)
        bound = amax / 254 if kind == "q8_0" else amax / 8
        assert bool((error <= bound * 1.01 + 1e-6).all())
        fresh = residual + keys.shape[2]  # the residual and the current tokens are exact
        assert torch.equal(got_k[:, :, -fresh:], history[:, :, -fresh:])


@pytest.mark.parametrize(("kind", "bits"), [("q8_0", 8.5), ("q4_0", 4.5)])
def test_block_formats_cost_their_nominal_bits(kind, bits):
    x = torch.randn(3, 4, 10, 64)
    q = quantize(x, kind)
    assert q.nbytes * 8 / x.numel() == bits
    assert dequantize(q, torch.float32).shape == x.shape


def test_q4_0_packs_two_values_per_byte_like_ggml():
    x = torch.arange(32, dtype=torch.float32).reshape(1, 32) - 8  # extreme value 23 -> d = -23/8
    q = quantize(x, "q4_0")
    assert q.data.shape == (1, 1, 16) and q.data.dtype == torch.uint8
    low, high = q.data[0, 0, 0] & 0x0F, q.data[0, 0, 0] >> 4  # values 0 and 16 of the block
    d = float(q.scale[0, 0, 0])
    assert (int(low) - 8) * d == pytest.approx(-8, abs=abs(d) / 2 + 1e-3)
    assert (int(high) - 8) * d == pytest.approx(8, abs=abs(d) / 2 + 1e-3)


@settings(max_examples=30, deadline=None)
@given(
    sizes=chunks,
    spec=st.sampled_from(
        [
            LayerSpec(),
            LayerSpec(sink=2, window=5),
            LayerSpec(quant="q8_0"),
            LayerSpec(quant="q4_0", residual=3),
            LayerSpec(sink=1, window=4, quant="q8_0"),
        ]
    ),
)
def test_byte_figures_equal_the_stored_tensors(sizes, spec):
    policy = KVLayer(spec)
    for _ in _feed(policy, sizes):
        pass
    stored = policy.stored
    residual = min(stored - min(spec.sink, stored), spec.residual) if spec.quant else 0
    exact_tokens = (min(spec.sink, stored) + residual) if spec.quant else stored
    quant_tokens = stored - exact_tokens
    per_token_blocks = HEADS * DIM // 32
    block_bytes = {None: 0, "q8_0": 32 + 2, "q4_0": 16 + 2}[spec.quant]
    expected = 2 * (exact_tokens * HEADS * DIM * 4 + quant_tokens * per_token_blocks * block_bytes)
    assert policy.held_bytes == expected


class _Projections(torch.nn.Module):
    """Stand-in for a Whisper attention module: the two projections a half layer needs."""

    def __init__(self, d_model=HEADS * DIM):
        super().__init__()
        self.num_heads, self.head_dim = HEADS, DIM
        self.k_proj = torch.nn.Linear(d_model, d_model, bias=False)
        self.v_proj = torch.nn.Linear(d_model, d_model)


@settings(max_examples=20, deadline=None)
@given(sizes=chunks)
def test_half_layer_recomputes_what_a_kv_layer_stores_at_half_the_bytes(sizes):
    torch.manual_seed(0)
    attention = _Projections().eval()
    half, kv = HalfLayer(LayerSpec(half=True)), KVLayer(LayerSpec())
    generator = torch.Generator().manual_seed(1)
    with torch.inference_mode():
        for size in sizes:
            hidden = torch.randn(1, size, HEADS * DIM, generator=generator)
            got_k, got_v = half.update_from_inputs(hidden, attention)
            want_k, want_v = kv.update_from_inputs(hidden, attention)
            torch.testing.assert_close(got_k, want_k, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(got_v, want_v, rtol=1e-5, atol=1e-5)
    assert half.held_bytes * 2 == kv.held_bytes and half.get_seq_length() == kv.get_seq_length()
    assert half.recompute_macs > 0 or len(sizes) == 1


def test_half_layer_refuses_plain_kv_updates():
    with pytest.raises(TypeError, match="update_from_inputs"):
        HalfLayer(LayerSpec(half=True)).update(torch.zeros(1, 1, 1, 64), torch.zeros(1, 1, 1, 64))


def test_layers_reorder_beams():
    cache = PolicyCache(parse_policy("sink=1,window=2; q8_0@layers=1", 2))
    layer = cache.layers[0]
    keys = torch.arange(3 * 4 * 64, dtype=torch.float32).reshape(3, 1, 4, 64)
    layer.update(keys, keys)
    layer.reorder_cache(torch.tensor([2, 2, 0]))
    returned, _ = layer.update(keys[:, :, :1], keys[:, :, :1])
    assert torch.equal(returned[0, :, :-1], returned[1, :, :-1])
    assert torch.equal(returned[2, :, 0], keys[0, :, 0])


class _Decoder(torch.nn.Module):
    def __init__(self, layers: int):
        super().__init__()
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            block = torch.nn.Module()
            block.encoder_attn = _Projections()
            self.layers.append(block)


def test_shared_cross_attention_holds_one_copy_per_beam_count_of_one():
    torch.manual_seed(0)
    decoder = _Decoder(2).eval()
    encoded = torch.randn(1, 1500, HEADS * DIM)
    sizes = {}
    for text in ("full", "shared", "shared,q8_0"):
        store = CrossAttentionStore(parse_cross(text), beams=5)
        store.fill(encoded, decoder)
        sizes[text] = store.held_bytes
    one_copy = 2 * 2 * 1500 * HEADS * DIM * 4  # K+V, 2 layers, fp32
    assert sizes == {"full": 5 * one_copy, "shared": one_copy, "shared,q8_0": one_copy * 8.5 / 32}


@pytest.mark.parametrize("text", ["full", "shared"])
def test_one_chunk_of_a_store_is_its_fill_alone_without_a_copy(text):
    """What word alignment reads after a batched decode: chunk 1 of 3, as if projected
    alone, held in the batch's own storage."""
    torch.manual_seed(0)
    decoder = _Decoder(2).eval()
    encoded = torch.randn(3, 1500, HEADS * DIM)
    store = CrossAttentionStore(parse_cross(text), beams=5)
    store.fill(encoded, decoder)
    alone = CrossAttentionStore(CrossSpec(), 1)
    alone.fill(encoded[1:2], decoder)
    one = store.one_chunk(1)
    for layer in range(2):
        for got, want in zip(one.get(layer), alone.get(layer), strict=True):
            assert got.shape == want.shape and torch.allclose(got, want, atol=1e-5)
    assert one.held_bytes == store.held_bytes  # views: the batch's storage, counted once
    with pytest.raises(ValueError, match="quantized"):
        CrossAttentionStore(parse_cross("shared,q8_0"), 1).one_chunk(0)


def test_cross_spec_parsing():
    assert parse_cross("shared,q8_0") == CrossSpec(shared=True, quant="q8_0")
    assert parse_cross("full") == CrossSpec()


@pytest.mark.parametrize(
    ("text", "layers", "expected"),
    [
        ("full", 4, ["full"] * 4),
        (
            "sink=4,window=64,q8_0@layers>=2",
            4,
            ["full", "full", "kv sink=4,window=64 q8_0", "kv sink=4,window=64 q8_0"],
        ),
        ("full; half@layers=odd", 4, ["full", "half", "full", "half"]),
        (
            "window=8; q4_0,residual=2@layers=1-2",
            4,
            [
                "kv window=8",
                "kv window=8 q4_0(residual=2)",
                "kv window=8 q4_0(residual=2)",
                "kv window=8",
            ],
        ),
    ],
)
def test_policy_language(text, layers, expected):
    assert [s.describe() for s in parse_policy(text, layers)] == expected


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("window=0", "window=0"),
        ("sink=4", "sink=4 on layer 0"),
        ("foo", "foo"),
        ("q8_0,half", "half + q8_0"),
        ("window=8@layer=1", "layer=1"),
        ("window=8@layers=x", "layers=x"),
        # parts that would do nothing on this model
        ("full@layers=7", "layers=7': selects no layer of this model (its decoder layers are 0-3)"),
        ("q8_0@layers>=4", "layers>=4': selects no layer"),
        ("residual=2", "residual=2 on layer 0': a residual"),
        ("q8_0,residual=2@layers=1; residual=1@layers=0", "residual=1 on layer 0'"),
    ],
)
def test_malformed_policies_name_the_bad_part(text, bad):
    from kvscribe.errors import ExitCode, UsageError

    with pytest.raises(UsageError) as caught:
        parse_policy(text, 4)
    assert f"'{bad}" in caught.value.one_line() and caught.value.exit_code == ExitCode.USAGE


def test_make_layer_picks_the_strategy():
    assert type(make_layer(LayerSpec(half=True))) is HalfLayer
    assert type(make_layer(LayerSpec(window=3))) is KVLayer


@pytest.fixture(scope="module")
def random_whisper():
    """A tiny random-weight Whisper: 2 decoder layers, d_model 128, 2 heads of 64."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    torch.manual_seed(0)
    config = WhisperConfig(
        vocab_size=300,
        num_mel_bins=8,
        d_model=128,
        encoder_layers=1,
        encoder_attention_heads=2,
        decoder_layers=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=256,
        decoder_ffn_dim=256,
        max_source_positions=50,
        max_target_positions=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=1,
        decoder_start_token_id=2,
    )
    model = WhisperForConditionalGeneration(config).eval()
    encoded = torch.randn(1, 50, 128)
    return model, encoded


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=10),
    policy=st.sampled_from(
        ["full", "sink=2,window=60", "window=64; half@layers=1", "half", "sink=1,window=63"]
    ),
)
def test_policy_decoder_matches_transformers_on_a_random_whisper(random_whisper, sizes, policy):
    from kvscribe.backends.transformers.decoder import PolicyDecoder

    model, encoded = random_whisper
    tokens = torch.randint(
        3, 300, (1, sum(sizes)), generator=torch.Generator().manual_seed(len(sizes))
    )
    with torch.inference_mode():
        expected = model(encoder_outputs=(encoded,), decoder_input_ids=tokens).logits[0]
    cache = PolicyCache(parse_policy(policy, 2))
    cross = CrossAttentionStore(parse_cross("shared"), 1)
    cross.fill(encoded, model.model.decoder)
    decoder, start, rows = PolicyDecoder(model), 0, []
    for size in sizes:
        chunk = tokens[:, start : start + size]
        rows.append(decoder.logits(chunk, cache, cross, positions=tuple(range(size)))[0])
        start += size
        assert cache.get_seq_length() == start  # positions are absolute
    torch.testing.assert_close(torch.cat(rows), expected, rtol=1e-4, atol=1e-4)
