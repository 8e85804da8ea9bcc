"""Export-only torch modules: Whisper's encoder, and one decoder step whose KV cache is
explicit inputs and outputs, over backends/transformers/network.py's modules (the transformers
backend's weights and operations; nothing here changes how that backend runs).

Why a step graph takes the cache as inputs instead of keeping it: kvscribe's policies
(sliding window, attention sinks, Q8_0/Q4_0 storage, one cross-attention copy per chunk)
act between steps, outside the graph. So the step takes, per layer, the self-attention
K/V the policy kept ([rows, heads, kept, head_dim], `kept` may be 0 and may differ between
layers), and returns only the new tokens' K/V, which the caller stores as it likes.

Positions are an input of their own ([rows, new], int64): a window or sink policy trims
the cache, but the next token's position still counts every token seen, as the torch
decoder's `embed_positions[seen:]` does. No attention mask over the kept entries: every
kept entry is visible to every new token (the torch decoder has no padding either), and
among the new tokens a key is hidden from a query at a lower position, so a multi-token
prompt is causal. The mask is built from `positions`, not from shape arithmetic, so it
traces to the same ops at any size.

Beams fold into the query axis. Tokens are [rows, new] with rows = chunks * beams,
chunk-major (chunk 0's beams, then chunk 1's: CrossAttentionStore's order), and each cross
K/V is [chunks, heads, frames, head_dim], one copy per chunk. A chunk's beams*new queries
attend its one copy together: attention over unmasked keys is a separate softmax per query
row, so folding changes no value, only how many K/V copies are read. rows == chunks is the
per-beam-copy case. The alternative layout, tokens [chunks, beams*new], would mix beams in
one row of the self-attention cache, whose entries differ per beam.

The step also returns the alignment heads' cross-attention scores before softmax
([rows, alignment heads, new, frames], the heads in generation_config.json's order), which
word timestamps read (kvscribe/stepped/alignment.py): a gather of scores the step computes
anyway.
"""

from __future__ import annotations

import torch
from torch import nn

from kvscribe.kvcache.layers import split_heads


class EncoderGraph(nn.Module):
    """Log-mel [batch, n_mels, 3000] -> per decoder layer its cross-attention K and V
    [batch, heads, frames, head_dim]: the projections are done once per chunk here, so a
    step never recomputes them."""

    def __init__(self, network) -> None:
        super().__init__()
        self.encoder = network.model.encoder
        self.layers = network.model.decoder.layers

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        encoded = self.encoder(features)
        out: list[torch.Tensor] = []
        for layer in self.layers:
            attention = layer.encoder_attn
            out.append(split_heads(attention.k_proj(encoded), attention))
            out.append(split_heads(attention.v_proj(encoded), attention))
        return tuple(out)


class DecoderStep(nn.Module):
    """forward(tokens, positions, past K/V of each layer, cross K/V of each layer) ->
    (logits [rows, new, vocab], new K/V of each layer, alignment scores)."""

    def __init__(self, network) -> None:
        super().__init__()
        self.decoder = network.model.decoder
        # The token embedding, stored once as [d_model, vocab]: the vocabulary projection
        # multiplies by it as it is, and a token's embedding is a column of it. With the
        # embedding and proj_out's transpose as two weights, the exporter writes the largest
        # tensor twice (tiny.en: 193 MB instead of 113 MB).
        vocab = network.model.decoder.embed_tokens.weight.detach().t().contiguous()
        self.vocab_by_column = nn.Parameter(vocab, requires_grad=False)
        self.alignment_heads = tuple(network.alignment_heads)

    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor, *caches: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        decoder = self.decoder
        n = len(decoder.layers)
        past, cross = caches[: 2 * n], caches[2 * n :]
        embedded = self.vocab_by_column.index_select(1, tokens.reshape(-1)).t()
        x = embedded.reshape(*tokens.shape, -1) + decoder.embed_positions(positions)
        new_kv: list[torch.Tensor] = []
        scores: list[torch.Tensor] = []
        for index, layer in enumerate(decoder.layers):
            attended, keys, values = _self_attention(
                layer, x, positions, past[2 * index], past[2 * index + 1]
            )
            x = x + attended
            new_kv += [keys, values]
            attended, layer_scores = _cross_attention(
                layer, x, cross[2 * index], cross[2 * index + 1]
            )
            x = x + attended
            scores.append(layer_scores)
            x = x + layer.feed_forward(x)
        logits = decoder.layer_norm(x) @ self.vocab_by_column
        return (logits, *new_kv, _alignment_scores(scores, self.alignment_heads, tokens))


def _self_attention(layer, x, positions, past_keys, past_values):
    """The layer's self-attention over its kept K/V and the new tokens; also returns the
    new tokens' K/V [rows, heads, new, head_dim]."""
    attention = layer.self_attn
    hidden = layer.self_attn_layer_norm(x)
    query = split_heads(attention.q_proj(hidden) * attention.scaling, attention)
    keys = split_heads(attention.k_proj(hidden), attention)
    values = split_heads(attention.v_proj(hidden), attention)
    # Key positions: -1 for every kept entry (always visible), the new tokens' own after.
    kept_positions = torch.zeros_like(past_keys[:, 0, :, 0], dtype=torch.int64) - 1
    key_positions = torch.cat([kept_positions, positions], dim=1)
    hidden_keys = key_positions[:, None, None, :] > positions[:, None, :, None]
    all_keys = torch.cat([past_keys, keys], dim=2)
    all_values = torch.cat([past_values, values], dim=2)
    weights = (query @ all_keys.transpose(-1, -2)).masked_fill(hidden_keys, float("-inf"))
    out = weights.softmax(dim=-1) @ all_values
    return attention.out_proj(_merge(out)), keys, values


def _cross_attention(layer, x, cross_keys, cross_values):
    """Cross-attention with the beams folded into the query axis: x [rows, new, d] with
    rows = chunks * beams (chunk-major) against one K/V copy per chunk. Returns the output
    and the scores before softmax, folded: [chunks, heads, beams * new, frames]."""
    attention = layer.encoder_attn
    query = attention.q_proj(layer.encoder_attn_layer_norm(x)) * attention.scaling
    chunks = cross_keys.shape[0]
    # [rows, new, d] is [chunks, beams * new, d] in memory: one reshape folds the beams.
    folded = query.reshape(chunks, -1, attention.num_heads, attention.head_dim).transpose(1, 2)
    scores = folded @ cross_keys.transpose(-1, -2)
    out = scores.softmax(dim=-1) @ cross_values  # [chunks, heads, beams * new, head_dim]
    out = out.transpose(1, 2).reshape(x.shape)
    return attention.out_proj(out), scores


def _alignment_scores(scores, heads, tokens):
    """The alignment heads' scores, unfolded to [rows, len(heads), new, frames]."""
    if not heads:  # a model without alignment heads: an empty output of the same rank
        return tokens[:, None, :, None].float()[:, :0]
    picked = torch.stack([scores[layer][:, head] for layer, head in heads], dim=1)
    chunks, count, _, frames = picked.shape
    rows, new = tokens.shape
    return (
        picked.reshape(chunks, count, -1, new, frames)
        .transpose(1, 2)
        .reshape(rows, count, new, frames)
    )


def _merge(x: torch.Tensor) -> torch.Tensor:
    batch, heads, tokens, dim = x.shape
    return x.transpose(1, 2).reshape(batch, tokens, heads * dim)
