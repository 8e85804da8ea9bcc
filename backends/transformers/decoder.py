"""Whisper's decoder forward over a transformers model's own modules, with our cache.

transformers' WhisperDecoder builds one attention mask for all layers from layer
0's cache; with per-layer policies the layers hold different lengths, so each
layer needs its own mask. Running the same modules here (same weights, same op
order) gives each layer its mask, lets half layers recompute K/V from their
inputs, and lets beams share one cross-attention copy.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kvscribe.kvcache.cache import CrossAttentionStore, PolicyCache
from kvscribe.kvcache.layers import split_heads


class PolicyDecoder:
    def __init__(self, model) -> None:
        self.decoder = model.model.decoder
        self.proj_out = model.proj_out

    @torch.inference_mode()
    def logits(
        self,
        tokens: torch.Tensor,
        cache: PolicyCache,
        cross: CrossAttentionStore,
        positions: tuple[int, ...] = (-1,),
    ) -> torch.Tensor:
        """Run `tokens` [batch, q] after what `cache` has seen -> [batch, len(positions), vocab]."""
        x = self._hidden(tokens, cache, cross, scores={})
        picked = x[:, list(positions)]
        return self._logits(picked)

    @torch.inference_mode()
    def logits_and_cross_scores(
        self,
        tokens: torch.Tensor,
        cache: PolicyCache,
        cross: CrossAttentionStore,
        layers: set[int],
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """Every position's logits [batch, q, vocab], and for each layer in `layers` its
        cross-attention scores before softmax [batch, heads, q, frames] (word alignment
        reads them; SDPA never returns them, so those layers compute attention in full)."""
        scores: dict[int, torch.Tensor] = dict.fromkeys(layers)
        x = self._hidden(tokens, cache, cross, scores)
        return self._logits(x), scores

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The vocabulary's logits in float32 whatever the network's dtype: log-probabilities
        summed over a beam's tokens need more than bfloat16's 8 bits of mantissa."""
        return self.proj_out(self.decoder.layer_norm(hidden)).float()

    def _hidden(
        self,
        tokens: torch.Tensor,
        cache: PolicyCache,
        cross: CrossAttentionStore,
        scores: dict[int, torch.Tensor | None],
    ) -> torch.Tensor:
        """The last layer's output; a layer whose index is a key of `scores` stores there."""
        decoder = self.decoder
        seen = cache.get_seq_length()
        query = tokens.shape[1]
        if seen + query > decoder.embed_positions.weight.shape[0]:
            raise ValueError(f"{seen + query} positions exceed the model's text context")
        x = decoder.embed_tokens(tokens) + decoder.embed_positions.weight[seen : seen + query]
        for index, layer in enumerate(decoder.layers):
            x = x + _self_attention(layer, cache.layers[index], x)
            if index in scores:
                attended, scores[index] = _cross_attention_with_scores(layer, cross, index, x)
                x = x + attended
            else:
                x = x + _cross_attention(layer, cross, index, x)
            x = x + layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(x))))
        cache.note_peak()
        return x


def _self_attention(layer, cache_layer, x: torch.Tensor) -> torch.Tensor:
    attention = layer.self_attn
    hidden = layer.self_attn_layer_norm(x)
    query = split_heads(attention.q_proj(hidden) * attention.scaling, attention)
    keys, values = cache_layer.update_from_inputs(hidden, attention)
    mask = _causal_mask(query.shape[-2], keys.shape[-2], x.device)
    out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask, scale=1.0)
    return attention.out_proj(_merge(out))


def _cross_attention(
    layer, cross: CrossAttentionStore, index: int, x: torch.Tensor
) -> torch.Tensor:
    attention = layer.encoder_attn
    query = split_heads(
        attention.q_proj(layer.encoder_attn_layer_norm(x)) * attention.scaling, attention
    )
    keys, values = cross.get(index)
    rows, heads, tokens, dim = query.shape
    copies = keys.shape[0]
    if copies > rows:  # per-beam copies are identical: a prompt row per chunk uses the first
        keys, values = keys[:: copies // rows], values[:: copies // rows]
        copies = rows
    if copies < rows:
        # One copy per chunk for all its beams: fold the beams into the query axis (no mask
        # here, so this is exact) instead of expanding K/V, which SDPA would copy per beam.
        beams = rows // copies
        folded = query.reshape(copies, beams, heads, tokens, dim).transpose(1, 2)
        folded = folded.reshape(copies, heads, beams * tokens, dim)
        out = F.scaled_dot_product_attention(folded, keys, values, scale=1.0)
        out = out.reshape(copies, heads, beams, tokens, dim).transpose(1, 2)
        out = out.reshape(rows, heads, tokens, dim)
    else:
        out = F.scaled_dot_product_attention(query, keys, values, scale=1.0)
    return attention.out_proj(_merge(out))


def _cross_attention_with_scores(
    layer, cross: CrossAttentionStore, index: int, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-attention written out (one K/V copy per row), returning its output and the
    scaled query-key scores before softmax."""
    attention = layer.encoder_attn
    query = split_heads(
        attention.q_proj(layer.encoder_attn_layer_norm(x)) * attention.scaling, attention
    )
    keys, values = cross.get(index)
    scores = query @ keys.transpose(-1, -2)
    out = scores.softmax(dim=-1) @ values
    return attention.out_proj(_merge(out)), scores


def _causal_mask(query: int, keys: int, device) -> torch.Tensor | None:
    """New token j may see every stored key and the new keys up to itself."""
    if query == 1:
        return None
    offset = keys - query
    rows = torch.arange(query, device=device)[:, None]
    cols = torch.arange(keys, device=device)[None, :]
    return cols <= rows + offset


def _merge(x: torch.Tensor) -> torch.Tensor:
    batch, heads, tokens, dim = x.shape
    return x.transpose(1, 2).reshape(batch, tokens, heads * dim)
