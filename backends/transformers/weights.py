"""The loaded network's weights made faster to run, in place, once at load: the vocabulary
projection's memory layout for CPU BLAS, and int8 linear layers for compute_type int8."""

from __future__ import annotations

import warnings

import torch


def relayout_vocab_projection(network) -> None:
    """Store the (tied) vocabulary projection transposed in memory, same values, same bytes.

    CPU BLAS multiplies by a [vocab, d] weight's transpose 2.3x slower than by a
    [d, vocab] one (measured: 19 vs 8 ms per beam-5 step on tiny.en); a transposed
    view of a contiguous transpose gives linear() the fast layout, and embedding
    lookups (a few rows per step) do not care.
    """
    weight = network.proj_out.weight
    relaid = torch.nn.Parameter(weight.detach().T.contiguous().T, requires_grad=False)
    if network.model.decoder.embed_tokens.weight is weight:
        network.model.decoder.embed_tokens.weight = relaid
    network.proj_out.weight = relaid


def int8_linear_layers(network) -> None:
    """Every nn.Linear to int8 weights (one scale per output row) with activations quantised
    per call, in place. Faster on CPU, less accurate: benchmarks/results/batched_longform.md
    (speed table) has both. torch.ao's eager API is deprecated in favour of torchao, but it
    is still the fast path on a CPU without torch.compile: per tiny.en-shaped layer it took
    0.19-0.74x fp32's time, torchao's int8 dynamic config 1.4-20x and torch's weight-only
    int8 kernel 2.3-98x (benchmarks/results/int8_linear.md). Its warnings say only that;
    tests/test_transformers_backend.py fails the day torch drops it.
    """
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(
            network, {torch.nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8, inplace=True
        )
