"""One decoder's cache for one 30 s window: a self-attention layer per decoder layer,
each following its policy, plus the cross-attention keys/values of the encoder output.

Every byte figure is the storage the cache keeps alive, read at the time: the distinct
storages behind its tensors, each counted once (`arrays.held_bytes`). The tensors are
torch's or numpy's, as the engine gives them (kvscribe.arrays).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kvscribe.arrays import held_bytes, repeat_rows, rows_kept, take_rows, unviewed
from kvscribe.kvcache.layers import KVLayer, make_layer, split_heads
from kvscribe.kvcache.quant import Quantized, dequantize, quantize
from kvscribe.kvcache.spec import CrossSpec, LayerSpec


class PolicyCache:
    """Self-attention cache whose layers follow per-layer specs."""

    def __init__(self, specs: tuple[LayerSpec, ...]) -> None:
        self.layers = [make_layer(spec) for spec in specs]
        self.peak_bytes = 0
        self.trace: list[tuple[int, int]] = []  # (positions seen, bytes stored) after each step

    @property
    def policy_layers(self) -> list[KVLayer]:
        return self.layers

    def tensors(self) -> Iterator[Any]:
        for layer in self.policy_layers:
            yield from layer.tensors()

    @property
    def held_bytes(self) -> int:
        return held_bytes(self.tensors())

    def get_seq_length(self) -> int:
        """Positions seen (every layer sees every position)."""
        return self.layers[0].get_seq_length()

    @property
    def recompute_macs(self) -> int:
        return sum(layer.recompute_macs for layer in self.policy_layers)

    def note_peak(self) -> int:
        stored = self.held_bytes
        self.peak_bytes = max(self.peak_bytes, stored)
        self.trace.append((self.get_seq_length(), stored))
        return self.peak_bytes


class CrossAttentionStore:
    """Per-layer K/V of the encoder output of each chunk in a batch: one copy per beam
    (rows chunk-major: chunk 0's beams, then chunk 1's, ...), or one copy per chunk."""

    def __init__(self, spec: CrossSpec, beams: int) -> None:
        self.spec = spec
        self.beams = beams
        self.chunks = 0
        self._layers: list[tuple[Any, Any]] = []  # per layer (K, V): arrays or Quantized
        self._dtype: Any = None
        # Whether nothing but this store sees its arrays (so dropping chunks may move rows
        # in place): not when it shares the encoder's, nor once one_chunk has lent views.
        self._exclusive = False

    def fill(self, encoder_output, decoder) -> None:
        """Project `encoder_output` [chunks, frames, d] (torch) through every decoder layer's
        cross-attention, a layer at a time (only one layer's projection is alive at once)."""
        import torch

        def projected():
            for layer in decoder.layers:  # no local keeps a projection once it is copied
                attention = layer.encoder_attn
                yield (
                    split_heads(attention.k_proj(encoder_output), attention),
                    split_heads(attention.v_proj(encoder_output), attention),
                )

        with torch.inference_mode():
            self.fill_projected(projected())

    def fill_projected(self, projected: Iterable[tuple[Any, Any]]) -> None:
        """Take every layer's cross-attention K/V [chunks, heads, frames, head_dim], already
        projected (an encoder graph returns them), as the spec keeps them."""
        copies = 1 if self.spec.shared else self.beams
        self._layers = []
        self._exclusive = copies > 1 or bool(self.spec.quant)  # made here: its own copies
        for keys, values in projected:
            self._dtype, self.chunks = keys.dtype, keys.shape[0]
            keys, values = unviewed(keys), unviewed(values)  # read-only from here on
            if copies > 1:  # what transformers does: a real copy per beam
                keys, values = repeat_rows(keys, copies), repeat_rows(values, copies)
            if self.spec.quant:
                keys, values = quantize(keys, self.spec.quant), quantize(values, self.spec.quant)
            self._layers.append((keys, values))

    def select_chunks(self, kept) -> None:
        """Keep only the chunks at positions `kept` (a list or an index tensor; the others
        finished decoding)."""
        kept = [int(k) for k in kept]
        rows = kept
        if not self.spec.shared and self.beams > 1:
            rows = [chunk * self.beams + beam for chunk in kept for beam in range(self.beams)]
        move = rows_kept if self._exclusive else take_rows
        self._layers = [(_rows(k, rows, move), _rows(v, rows, move)) for k, v in self._layers]
        self.chunks = len(kept)
        self._exclusive = True  # copies of its own, or its own arrays still

    def one_chunk(self, index: int) -> CrossAttentionStore:
        """Chunk `index`'s full-precision K/V as a store of its own, for one row (views, no
        copy): what word alignment reads after the decode, so the encoder output is not
        projected a second time. Taken before `select_chunks` drops the chunk."""
        if self.spec.quant:
            raise ValueError("a quantized store does not hold the full-precision K/V")
        row = index * (1 if self.spec.shared else self.beams)
        self._exclusive = False  # the views must keep reading this chunk
        single = CrossAttentionStore(CrossSpec(), 1)
        single.chunks, single._dtype = 1, self._dtype
        single._layers = [(k[row : row + 1], v[row : row + 1]) for k, v in self._layers]
        return single

    def get(self, index: int) -> tuple[Any, Any]:
        """K/V of layer `index`: one row per chunk when shared, else one row per beam."""
        keys, values = self._layers[index]
        if isinstance(keys, Quantized):
            keys, values = dequantize(keys, self._dtype), dequantize(values, self._dtype)
        return keys, values

    def tensors(self) -> Iterator[Any]:
        for pair in self._layers:
            for part in pair:
                yield from part.tensors() if isinstance(part, Quantized) else (part,)

    @property
    def held_bytes(self) -> int:
        return held_bytes(self.tensors())


def _rows(part, rows: list[int], move):
    """`move` (take_rows, or rows_kept in place) applied to an array or a Quantized's parts."""
    if isinstance(part, Quantized):
        return Quantized(part.kind, move(part.data, rows), move(part.scale, rows))
    return move(part, rows)
