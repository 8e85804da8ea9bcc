"""KV-cache sizes from Whisper's dimensions, for engines that do not expose their cache.

Self-attention holds K and V for every decoder layer and every position seen in
the current 30 s window; cross-attention holds K and V of the 1500 encoder
frames for every decoder layer. Both are multiplied by the number of beams when
the engine keeps one copy per beam.
"""

from __future__ import annotations

from kvscribe.models.ct2_file import WhisperDims

# Bytes per cached value for an engine's compute type (activations, not weights).
_VALUE_BYTES = {
    "float32": 4,
    "int8": 4,
    "int8_float32": 4,
    "int16": 4,
    "float16": 2,
    "int8_float16": 2,
    "bfloat16": 2,
    "int8_bfloat16": 2,
}


def value_bytes(compute_type: str) -> int:
    return _VALUE_BYTES.get(compute_type, 4)


def self_attention_bytes(dims: WhisperDims, positions: int, beams: int, nbytes: int) -> int:
    """K+V of `positions` tokens in every decoder layer, for `beams` hypotheses."""
    return 2 * dims.n_text_layer * dims.n_text_state * positions * beams * nbytes


def cross_attention_bytes(dims: WhisperDims, copies: int, nbytes: int) -> int:
    """K+V of all encoder frames in every decoder layer, `copies` times (1 when shared)."""
    return 2 * dims.n_text_layer * dims.n_audio_ctx * dims.n_text_state * copies * nbytes
