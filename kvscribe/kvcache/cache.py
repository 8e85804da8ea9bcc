"""One decoder's cache for one 30 s window: a transformers `Cache` of policy layers,
plus the cross-attention keys/values of the encoder output.

Every byte figure is the storage the cache keeps alive, read at the time: the distinct
storages behind its tensors, each counted once (`storage.held_bytes`).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from transformers.cache_utils import Cache

from kvscribe.kvcache.layers import KVLayer, make_layer, split_heads
from kvscribe.kvcache.quant import Quantized, dequantize, quantize
from kvscribe.kvcache.spec import CrossSpec, LayerSpec
from kvscribe.kvcache.storage import held_bytes, owned


class PolicyCache(Cache):
    """Self-attention cache whose layers follow per-layer specs."""

    def __init__(self, specs: tuple[LayerSpec, ...]) -> None:
        super().__init__(layers=[make_layer(spec) for spec in specs])
        self.peak_bytes = 0
        self.trace: list[tuple[int, int]] = []  # (positions seen, bytes stored) after each step

    @property
    def policy_layers(self) -> list[KVLayer]:
        return self.layers

    def tensors(self) -> Iterator[torch.Tensor]:
        for layer in self.policy_layers:
            yield from layer.tensors()

    @property
    def held_bytes(self) -> int:
        return held_bytes(self.tensors())

    @property
    def recompute_macs(self) -> int:
        return sum(layer.recompute_macs for layer in self.policy_layers)

    def note_peak(self) -> int:
        stored = self.held_bytes
        self.peak_bytes = max(self.peak_bytes, stored)
        self.trace.append((self.get_seq_length(), stored))
        return self.peak_bytes


class CrossAttentionStore:
    """Per-layer K/V of the encoder output: one copy per beam, or one shared copy."""

    def __init__(self, spec: CrossSpec, beams: int) -> None:
        self.spec = spec
        self.beams = beams
        self._layers: list[tuple[torch.Tensor | Quantized, torch.Tensor | Quantized]] = []
        self._dtype: torch.dtype | None = None

    @torch.inference_mode()
    def fill(self, encoder_output: torch.Tensor, decoder) -> None:
        """Project `encoder_output` [1, frames, d] through every decoder layer's cross-attention."""
        self._dtype = encoder_output.dtype
        copies = 1 if self.spec.shared else self.beams
        self._layers = []
        for layer in decoder.layers:
            attention = layer.encoder_attn
            keys = owned(split_heads(attention.k_proj(encoder_output), attention))
            values = owned(split_heads(attention.v_proj(encoder_output), attention))
            if copies > 1:  # what transformers does: a real copy per beam
                keys, values = keys.repeat(copies, 1, 1, 1), values.repeat(copies, 1, 1, 1)
            if self.spec.quant:
                keys, values = quantize(keys, self.spec.quant), quantize(values, self.spec.quant)
            self._layers.append((keys, values))

    def get(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of layer `index`: batch 1 when shared, else one row per beam."""
        keys, values = self._layers[index]
        if isinstance(keys, Quantized):
            keys, values = dequantize(keys, self._dtype), dequantize(values, self._dtype)
        return keys, values

    def tensors(self) -> Iterator[torch.Tensor]:
        for pair in self._layers:
            for part in pair:
                yield from part.tensors() if isinstance(part, Quantized) else (part,)

    @property
    def held_bytes(self) -> int:
        return held_bytes(self.tensors())
