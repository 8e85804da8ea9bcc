"""Per-layer self-attention cache strategies.

A layer keeps its first `sink` tokens and (when windowed) its newest `window`
tokens; quantized layers keep older tokens in ggml blocks. Positions stay
absolute: `get_seq_length()` is the number of tokens *seen*, not stored.

`KVLayer` stores keys and values (shape [batch, heads, tokens, head_dim]), torch tensors or
numpy arrays (kvscribe.arrays): `update` for an engine whose attention reads the
cache itself, `past` and `add` for one that takes the past as input and returns the new
tokens' K/V (the ONNX step graph, backends/onnx).
`HalfLayer` stores the layer's normalised inputs instead (one d_model vector per
token, half of K+V) and recomputes K and V from them at every step; it counts the
multiply-adds that costs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvscribe.arrays import cat, held_bytes
from kvscribe.kvcache.spec import LayerSpec
from kvscribe.kvcache.stores import QuantizedStore, TensorStore


class _Trimmed:
    """Sink + body token streams with the sink/window trimming rule."""

    def __init__(self, spec: LayerSpec, make_body) -> None:
        self.spec = spec
        self.sink = TensorStore()
        self.body = make_body()

    def __len__(self) -> int:
        return len(self.sink) + len(self.body)

    def tensors(self) -> Iterator[Any]:
        yield from self.sink.tensors()
        yield from self.body.tensors()

    def read(self) -> Any:
        parts = [p for p in (self.sink.read(), self.body.read()) if p is not None]
        return cat(parts, axis=-2) if len(parts) > 1 else (parts[0] if parts else None)

    def append(self, x) -> None:
        room = self.spec.sink - len(self.sink)
        if room > 0:
            self.sink.append(x[..., :room, :])
            x = x[..., room:, :]
        if x.shape[-2]:
            self.body.append(x)
        if self.spec.window is not None:
            self.body.drop_oldest(len(self.body) - self.spec.window)

    def select_batch(self, index) -> None:
        self.sink.select_batch(index)
        self.body.select_batch(index)


def _with(stored, new):
    return new if stored is None else cat([stored, new], axis=-2)


class KVLayer:
    """Keys and values, trimmed and/or quantized by a LayerSpec.

    Its update() / get_seq_length() / reorder_cache() read as transformers' cache layers'
    do (tests/test_kvcache.py holds a full layer to transformers' DynamicLayer), without
    importing transformers."""

    def __init__(self, spec: LayerSpec) -> None:
        self.spec = spec
        self.is_initialized = False
        self.seen = 0
        self.recompute_macs = 0
        self._keys = _Trimmed(spec, self._body)
        self._values = _Trimmed(spec, self._body)

    def _body(self):
        return (
            QuantizedStore(self.spec.quant, self.spec.residual)
            if self.spec.quant
            else TensorStore()
        )

    def lazy_initialization(self, key_states, value_states) -> None:
        self.dtype, self.device = key_states.dtype, getattr(key_states, "device", "cpu")
        self.is_initialized = True

    def update(self, key_states, value_states, *args, **kwargs):
        """Return K/V for attention (stored + new), then store the new tokens under the policy."""
        keys = _with(self._keys.read(), key_states)
        values = _with(self._values.read(), value_states)
        self.add(key_states, value_states)
        return keys, values

    def past(self) -> tuple[Any, Any]:
        """The K/V kept (quantized ones read back), None before the first tokens."""
        return self._keys.read(), self._values.read()

    def add(self, key_states, value_states) -> None:
        """Store the new tokens' K/V under the policy."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.seen += key_states.shape[-2]
        self._keys.append(key_states)
        self._values.append(value_states)

    def update_from_inputs(self, hidden, attention) -> tuple[Any, Any]:
        """K/V for `hidden` [batch, q, d_model] through `attention`'s projections."""
        return self.update(
            split_heads(attention.k_proj(hidden), attention),
            split_heads(attention.v_proj(hidden), attention),
        )

    @property
    def stored(self) -> int:
        return len(self._keys)

    def tensors(self) -> Iterator[Any]:
        """Every tensor this layer keeps between steps."""
        yield from self._keys.tensors()
        yield from self._values.tensors()

    @property
    def held_bytes(self) -> int:
        """Storage this layer keeps alive (distinct storages, counted once)."""
        return held_bytes(self.tensors())

    def get_seq_length(self) -> int:
        return self.seen

    def reorder_cache(self, beam_idx) -> None:
        if self.seen:
            self._keys.select_batch(beam_idx)
            self._values.select_batch(beam_idx)


class HalfLayer(KVLayer):
    """Keeps normalised layer inputs and recomputes K/V from them each step."""

    def __init__(self, spec: LayerSpec) -> None:
        super().__init__(spec)
        self._inputs = _Trimmed(spec, TensorStore)

    def update(self, key_states, value_states, *args, **kwargs):
        raise TypeError("a half layer recomputes K/V from its inputs: call update_from_inputs()")

    def past(self):
        raise TypeError("a half layer keeps inputs, not K/V (backends/onnx/engine.py: n/a)")

    add = update

    def update_from_inputs(self, hidden, attention) -> tuple[Any, Any]:
        if not self.is_initialized:
            self.lazy_initialization(hidden, hidden)
        everything = _with(self._inputs.read(), hidden)
        self.recompute_macs += 2 * self.stored * hidden.shape[0] * hidden.shape[-1] ** 2
        self.seen += hidden.shape[-2]
        self._inputs.append(hidden)
        return split_heads(attention.k_proj(everything), attention), split_heads(
            attention.v_proj(everything), attention
        )

    @property
    def stored(self) -> int:
        return len(self._inputs)

    def tensors(self) -> Iterator[Any]:
        yield from self._inputs.tensors()

    def reorder_cache(self, beam_idx) -> None:
        if self.seen:
            self._inputs.select_batch(beam_idx)


def split_heads(x, attention):
    """[batch, tokens, heads * head_dim] -> [batch, heads, tokens, head_dim]."""
    batch, tokens, _ = x.shape
    return x.view(batch, tokens, attention.num_heads, attention.head_dim).transpose(1, 2)


def make_layer(spec: LayerSpec) -> KVLayer:
    return HalfLayer(spec) if spec.half else KVLayer(spec)
