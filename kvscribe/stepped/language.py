"""Which language a window is spoken in: openai-whisper's detect_language on kvscribe's
decoder step, for every engine kvscribe steps itself (torch or numpy: kvscribe.arrays)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvscribe import arrays
from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.spec import CrossSpec, LayerSpec
from kvscribe.models.vocab import SpecialTokens
from kvscribe.stepped.search import StepDecoder


def detect_language(
    decoder: StepDecoder,
    fill_cross: Callable[[CrossAttentionStore, Any], None],
    encoded,
    special: SpecialTokens,
    self_specs: tuple[LayerSpec, ...],
    cross_spec: CrossSpec,
    device,
) -> tuple[str, float]:
    """The most likely language token after <|startoftranscript|> for one encoded window
    (what the engine's `fill_cross` takes), and its probability among the language tokens.
    `device`: the torch device the decoder runs on, None for a numpy engine."""
    with arrays.inference(device):
        cross = CrossAttentionStore(cross_spec, 1)
        fill_cross(cross, encoded)
        start = arrays.tokens([[special.sot]], device)
        logits = decoder.logits(start, PolicyCache(self_specs), cross)[0, -1]
        codes = list(special.languages)
        ids = arrays.index([special.languages[code] for code in codes], device)
        probabilities = arrays.softmax(arrays.float32(logits[ids]))
        best = int(probabilities.argmax())
        return codes[best], float(probabilities[best])
