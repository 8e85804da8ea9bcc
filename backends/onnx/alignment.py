"""Word timestamps on the ONNX engine: kvscribe/stepped/alignment.py's WordAligner, whose
teacher-forced pass is one OnnxEngine step (the step graph returns the alignment heads'
cross-attention scores before softmax, backends/onnx/graphs.py). numpy and onnxruntime
only, like the engine.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvscribe.backends.onnx.engine import OnnxEngine
from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.spec import CrossSpec, LayerSpec
from kvscribe.models.vocab import SpecialTokens
from kvscribe.stepped.alignment import WordAligner


class EngineAttend:
    """The core aligner's `attend` (kvscribe.stepped.alignment.Attend) on an OnnxEngine."""

    def __init__(self, engine: OnnxEngine) -> None:
        self.engine = engine

    def __call__(
        self, encoded, ids: list[int], cross: CrossAttentionStore | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(logits [len(ids), vocab], scores [alignment heads, len(ids), frames]) of one
        step over `ids` from an empty full-precision cache. `encoded`: what
        OnnxEngine.encode returns for one window, projected into a full-precision store
        when `cross` is None."""
        if cross is None:
            cross = CrossAttentionStore(CrossSpec(), 1)
            cross.fill_projected(encoded)
        cache = PolicyCache(tuple(LayerSpec() for _ in range(self.engine.layers)))
        out = self.engine.step(np.array([ids], dtype=np.int64), cache, cross)
        return out.logits[0], out.alignment_scores[0]


def onnx_word_aligner(
    engine: OnnxEngine, special: SpecialTokens, decode_text: Callable[[list[int]], str]
) -> WordAligner:
    """The core WordAligner on `engine`; ValueError when its export has no alignment heads
    (the step graph's scores output then has none)."""
    if _alignment_head_count(engine) == 0:
        raise ValueError("the model's generation config names no alignment heads")
    return WordAligner(EngineAttend(engine), special, decode_text)


def _alignment_head_count(engine: OnnxEngine) -> int | None:
    """The heads axis of the step graph's last output (alignment_scores [rows, heads, new,
    frames]); None where the graph leaves it unnamed."""
    heads = engine.decoder.get_outputs()[-1].shape[1]
    return heads if isinstance(heads, int) else None
