"""Word timestamps for the transformers backend: the torch half of the aligner.

The method (openai-whisper's alignment heads + median filter + DTW) lives in
kvscribe/stepped/alignment.py, numpy only, shared with the onnx backend. Here is what it
needs from the transformers network: `NetworkAttend`, its teacher-forced pass through
PolicyDecoder returning the alignment heads' cross-attention scores, and `WordAligner`,
the core aligner built on it with the constructor this backend has always called. The
names other modules import from here (dtw, the constants) are the core's, re-exported.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.spec import CrossSpec, LayerSpec
from kvscribe.models.vocab import SpecialTokens
from kvscribe.stepped import alignment as core
from kvscribe.stepped.alignment import (
    MEDIAN_FILTER_WIDTH,
    SECONDS_PER_ENCODER_FRAME,
    SECONDS_PER_FRAME,
    SECONDS_PER_TIMESTAMP,
    dtw,
)
from kvscribe.types import Word

from .decoder import PolicyDecoder

__all__ = [
    "MEDIAN_FILTER_WIDTH",
    "SECONDS_PER_ENCODER_FRAME",
    "SECONDS_PER_FRAME",
    "SECONDS_PER_TIMESTAMP",
    "NetworkAttend",
    "WordAligner",
    "alignment_heads",
    "dtw",
]


def alignment_heads(model_dir: Path) -> tuple[tuple[int, int], ...]:
    """(layer, head) pairs from the model's generation_config.json; () when it has none."""
    config = json.loads((model_dir / "generation_config.json").read_text(encoding="utf-8"))
    return tuple((int(layer), int(head)) for layer, head in config.get("alignment_heads") or ())


class NetworkAttend:
    """The core aligner's `attend` (kvscribe.stepped.alignment.Attend) on a transformers
    network: one teacher-forced PolicyDecoder pass, the alignment heads' scores kept."""

    def __init__(self, network, device, dtype: torch.dtype, heads: Sequence[tuple[int, int]]):
        self.decoder = PolicyDecoder(network)
        self.decoder_module = network.model.decoder
        self.device = torch.device(device)
        self.dtype = dtype
        self.heads = tuple(heads)
        self.n_layers = len(self.decoder_module.layers)

    @torch.inference_mode()
    def __call__(
        self, encoded: torch.Tensor, ids: list[int], cross: CrossAttentionStore | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(logits [len(ids), vocab], scores [heads, len(ids), frames]), numpy float32;
        `encoded` [1, frames, d] fills a full-precision store when `cross` is None."""
        if cross is None:
            cross = CrossAttentionStore(CrossSpec(), 1)
            cross.fill(encoded.to(self.dtype), self.decoder_module)
        cache = PolicyCache(tuple(LayerSpec() for _ in range(self.n_layers)))
        layers = {layer for layer, _ in self.heads}
        tokens = torch.tensor([ids], device=self.device)
        logits, scores = self.decoder.logits_and_cross_scores(tokens, cache, cross, layers)
        picked = torch.stack([scores[layer][0, head] for layer, head in self.heads])
        return _numpy(logits[0]), _numpy(picked)


class WordAligner(core.WordAligner):
    """The core aligner on a transformers network; refuses a model without alignment heads."""

    def __init__(
        self,
        network,
        special: SpecialTokens,
        decode_text: Callable[[list[int]], str],
        device,
        dtype: torch.dtype,
        heads: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        heads = tuple(heads) if heads is not None else _config_heads(network)
        if not heads:
            raise ValueError("the model's generation config names no alignment heads")
        super().__init__(NetworkAttend(network, device, dtype, heads), special, decode_text)
        self.heads = heads

    def __call__(self, encoded: torch.Tensor, *args, **kwargs) -> list[tuple[Word, ...]]:
        """kvscribe.stepped.alignment.WordAligner.__call__, `encoded` being the window's
        encoder output [1, frames, d]."""
        if encoded.dim() != 3 or encoded.shape[0] != 1:
            raise ValueError(f"one window's encoder output [1, frames, d], not {encoded.shape}")
        return super().__call__(encoded, *args, **kwargs)


def _numpy(x: torch.Tensor) -> np.ndarray:
    return x.float().cpu().numpy()


def _config_heads(network) -> tuple[tuple[int, int], ...]:
    """The heads the network was loaded with (backends/transformers/network.py), or a transformers
    model's generation config's."""
    heads = getattr(network, "alignment_heads", None)
    if heads is None:
        heads = getattr(network.generation_config, "alignment_heads", None) or ()
    return tuple((int(layer), int(head)) for layer, head in heads)
