"""ggml's Q8_0 and Q4_0 block formats, in torch, along the last dimension.

A block is 32 consecutive values and one fp16 scale `d`:
- Q8_0: q = round(x / d), d = max|x| / 127, int8 values: 8.5 bits per value.
- Q4_0: d = m / -8 where m is the value of largest magnitude; q = min(15, trunc(x / d + 8.5)),
  two 4-bit values per byte (value j in the low nibble, j + 16 in the high one): 4.5 bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

BLOCK = 32


@dataclass
class Quantized:
    """Blocks of one tensor: `data` int8 [..., n_blocks, 32] (Q8_0) or uint8 [..., n_blocks, 16]."""

    kind: str
    data: torch.Tensor
    scale: torch.Tensor  # fp16 [..., n_blocks, 1]

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.data, self.scale

    @property
    def nbytes(self) -> int:
        """Bytes of the blocks' values and scales (the format's nominal size)."""
        return self.data.nbytes + self.scale.nbytes


def quantize(x: torch.Tensor, kind: str) -> Quantized:
    if x.shape[-1] % BLOCK:
        raise ValueError(f"last dimension {x.shape[-1]} is not a multiple of {BLOCK}")
    blocks = x.float().reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)
    if kind == "q8_0":
        return _q8_0(blocks)
    if kind == "q4_0":
        return _q4_0(blocks)
    raise ValueError(f"unknown quantization {kind!r}")


def dequantize(q: Quantized, dtype: torch.dtype) -> torch.Tensor:
    scale = q.scale.float()
    if q.kind == "q8_0":
        values = q.data.float() * scale
    else:
        low = (q.data & 0x0F).to(torch.int16) - 8
        high = (q.data >> 4).to(torch.int16) - 8
        values = torch.cat([low, high], dim=-1).float() * scale
    return values.reshape(*values.shape[:-2], -1).to(dtype)


def _q8_0(blocks: torch.Tensor) -> Quantized:
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    scale = (amax / 127).to(torch.float16)
    inverse = torch.where(scale > 0, 1 / scale.float(), torch.zeros_like(amax))
    data = torch.round(blocks * inverse).clamp_(-127, 127).to(torch.int8)
    return Quantized("q8_0", data, scale)


def _q4_0(blocks: torch.Tensor) -> Quantized:
    index = blocks.abs().argmax(dim=-1, keepdim=True)
    extreme = blocks.gather(-1, index)
    scale = (extreme / -8).to(torch.float16)
    inverse = torch.where(scale != 0, 1 / scale.float(), torch.zeros_like(extreme))
    codes = torch.clamp(torch.trunc(blocks * inverse + 8.5), 0, 15).to(torch.uint8)
    packed = codes[..., : BLOCK // 2] | (codes[..., BLOCK // 2 :] << 4)
    return Quantized("q4_0", packed, scale)
