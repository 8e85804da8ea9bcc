"""ggml's Q8_0 and Q4_0 block formats along the last dimension, for torch tensors and numpy
arrays (the same arithmetic in the same float32 steps, so both give the same blocks).

A block is 32 consecutive values and one fp16 scale `d`:
- Q8_0: q = round(x / d), d = max|x| / 127, int8 values: 8.5 bits per value.
- Q4_0: d = m / -8 where m is the value of largest magnitude; q = min(15, trunc(x / d + 8.5)),
  two 4-bit values per byte (value j in the low nibble, j + 16 in the high one): 4.5 bits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvscribe.arrays import cat, is_numpy

BLOCK = 32


@dataclass
class Quantized:
    """Blocks of one tensor: `data` int8 [..., n_blocks, 32] (Q8_0) or uint8 [..., n_blocks, 16]."""

    kind: str
    data: Any  # a torch tensor or a numpy array, as was quantized
    scale: Any  # fp16 [..., n_blocks, 1]

    def tensors(self) -> tuple[Any, Any]:
        return self.data, self.scale

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks' values and scales (the format's nominal size)."""
        return self.data.nbytes + self.scale.nbytes


def quantize(x, kind: str) -> Quantized:
    if x.shape[-1] % BLOCK:
        raise ValueError(f"last dimension {x.shape[-1]} is not a multiple of {BLOCK}")
    shape = (*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    if kind not in ("q8_0", "q4_0"):
        raise ValueError(f"unknown quantization {kind!r}")
    if is_numpy(x):
        blocks = x.astype(np.float32).reshape(shape)
        return _numpy_q8_0(blocks) if kind == "q8_0" else _numpy_q4_0(blocks)
    blocks = x.float().reshape(shape)
    return _q8_0(blocks) if kind == "q8_0" else _q4_0(blocks)


def dequantize(q: Quantized, dtype):
    """The values of `q` in `dtype` (a torch dtype for torch blocks, a numpy one for numpy)."""
    if is_numpy(q.data):
        return _numpy_values(q).astype(dtype)
    scale = q.scale.float()
    if q.kind == "q8_0":
        values = q.data.float() * scale
    else:
        import torch

        low = (q.data & 0x0F).to(torch.int16) - 8
        high = (q.data >> 4).to(torch.int16) - 8
        values = torch.cat([low, high], dim=-1).float() * scale
    return values.reshape(*values.shape[:-2], -1).to(dtype)


def concat(older: Quantized, newer: Quantized) -> Quantized:
    """One run of blocks along the token axis (-3 of the blocks): `older`'s, then `newer`'s."""
    data = cat([older.data, newer.data], axis=-3)
    return Quantized(older.kind, data, cat([older.scale, newer.scale], axis=-3))


def _q8_0(blocks) -> Quantized:
    import torch

    amax = blocks.abs().amax(dim=-1, keepdim=True)
    scale = (amax / 127).to(torch.float16)
    inverse = torch.where(scale > 0, 1 / scale.float(), torch.zeros_like(amax))
    data = torch.round(blocks * inverse).clamp_(-127, 127).to(torch.int8)
    return Quantized("q8_0", data, scale)


def _q4_0(blocks) -> Quantized:
    import torch

    index = blocks.abs().argmax(dim=-1, keepdim=True)
    extreme = blocks.gather(-1, index)
    scale = (extreme / -8).to(torch.float16)
    inverse = torch.where(scale != 0, 1 / scale.float(), torch.zeros_like(extreme))
    codes = torch.clamp(torch.trunc(blocks * inverse + 8.5), 0, 15).to(torch.uint8)
    packed = codes[..., : BLOCK // 2] | (codes[..., BLOCK // 2 :] << 4)
    return Quantized("q4_0", packed, scale)


def _numpy_q8_0(blocks: np.ndarray) -> Quantized:
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    scale = (amax / np.float32(127)).astype(np.float16)
    inverse = _inverse(scale)
    data = np.clip(np.round(blocks * inverse), -127, 127).astype(np.int8)
    return Quantized("q8_0", data, scale)


def _numpy_q4_0(blocks: np.ndarray) -> Quantized:
    index = np.abs(blocks).argmax(axis=-1)[..., None]
    extreme = np.take_along_axis(blocks, index, axis=-1)
    scale = (extreme / np.float32(-8)).astype(np.float16)
    codes = np.clip(np.trunc(blocks * _inverse(scale) + np.float32(8.5)), 0, 15).astype(np.uint8)
    packed = codes[..., : BLOCK // 2] | (codes[..., BLOCK // 2 :] << 4)
    return Quantized("q4_0", packed, scale)


def _inverse(scale: np.ndarray) -> np.ndarray:
    """1 / scale in float32, 0 where the scale is 0 (a block of zeros)."""
    wide = scale.astype(np.float32)
    return np.divide(np.float32(1), wide, out=np.zeros_like(wide), where=wide != 0)


def _numpy_values(q: Quantized) -> np.ndarray:
    scale = q.scale.astype(np.float32)
    if q.kind == "q8_0":
        values = q.data.astype(np.float32) * scale
    else:
        low = (q.data & 0x0F).astype(np.int16) - 8
        high = (q.data >> 4).astype(np.int16) - 8
        values = np.concatenate([low, high], axis=-1).astype(np.float32) * scale
    return values.reshape(*values.shape[:-2], -1)
