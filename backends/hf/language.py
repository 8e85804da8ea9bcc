"""Which language a window is spoken in: openai-whisper's detect_language on kvscribe's
decoder step."""

from __future__ import annotations

import torch

from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.spec import CrossSpec, LayerSpec
from kvscribe.models.vocab import SpecialTokens

from .decoder import PolicyDecoder


@torch.inference_mode()
def detect_language(
    network,
    encoded: torch.Tensor,
    special: SpecialTokens,
    self_specs: tuple[LayerSpec, ...],
    cross_spec: CrossSpec,
) -> tuple[str, float]:
    """The most likely language token after <|startoftranscript|> for one encoded window
    [1, frames, d], and its probability among the language tokens."""
    cross = CrossAttentionStore(cross_spec, 1)
    cross.fill(encoded, network.model.decoder)
    start = torch.tensor([[special.sot]], device=encoded.device)
    logits = PolicyDecoder(network).logits(start, PolicyCache(self_specs), cross)[0, -1]
    codes = list(special.languages)
    ids = torch.tensor([special.languages[code] for code in codes], device=encoded.device)
    probabilities = torch.softmax(logits[ids].float(), dim=-1)
    best = int(probabilities.argmax())
    return codes[best], float(probabilities[best])
