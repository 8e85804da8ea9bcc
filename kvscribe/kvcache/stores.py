"""Token stores: where one tensor stream ([batch, heads, tokens, dim] or [batch, tokens, dim])
of a cache layer lives. The token axis is -2 everywhere."""

from __future__ import annotations

import torch

from kvscribe.kvcache.quant import Quantized, dequantize, quantize


class TensorStore:
    """Tokens kept as they are."""

    def __init__(self) -> None:
        self.data: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.data is None else self.data.shape[-2]

    @property
    def nbytes(self) -> int:
        return 0 if self.data is None else self.data.nbytes

    def append(self, x: torch.Tensor) -> None:
        self.data = x if self.data is None else torch.cat([self.data, x], dim=-2)

    def drop_oldest(self, n: int) -> None:
        if n > 0 and self.data is not None:
            self.data = self.data[..., n:, :].contiguous()

    def read(self) -> torch.Tensor | None:
        return self.data

    def select_batch(self, index: torch.Tensor) -> None:
        if self.data is not None:
            self.data = self.data.index_select(0, index)


class QuantizedStore:
    """Older tokens in Q8_0/Q4_0 blocks, the newest `residual` in full precision."""

    def __init__(self, kind: str, residual: int) -> None:
        self.kind = kind
        self.residual = residual
        self.blocks: list[Quantized] = []  # one entry per quantized token run, oldest first
        self.counts: list[int] = []
        self.recent = TensorStore()
        self.dtype: torch.dtype | None = None

    def __len__(self) -> int:
        return sum(self.counts) + len(self.recent)

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.blocks) + self.recent.nbytes

    def append(self, x: torch.Tensor) -> None:
        self.dtype = x.dtype
        self.recent.append(x)
        overflow = len(self.recent) - self.residual
        if overflow > 0:
            old = self.recent.data[..., :overflow, :]
            self.blocks.append(quantize(old, self.kind))
            self.counts.append(overflow)
            self.recent.drop_oldest(overflow)

    def drop_oldest(self, n: int) -> None:
        while n > 0 and self.counts:
            if self.counts[0] <= n:
                n -= self.counts.pop(0)
                self.blocks.pop(0)
            else:  # split a run: its tokens are whole rows of blocks along the token axis
                q = self.blocks[0]
                self.blocks[0] = Quantized(q.kind, q.data[..., n:, :, :], q.scale[..., n:, :, :])
                self.counts[0] -= n
                n = 0
        self.recent.drop_oldest(n)

    def read(self) -> torch.Tensor | None:
        parts = [dequantize(b, self.dtype) for b in self.blocks]
        if self.recent.data is not None:
            parts.append(self.recent.data)
        return torch.cat(parts, dim=-2) if parts else None

    def select_batch(self, index: torch.Tensor) -> None:
        self.blocks = [
            Quantized(b.kind, b.data.index_select(0, index), b.scale.index_select(0, index))
            for b in self.blocks
        ]
        self.recent.select_batch(index)
