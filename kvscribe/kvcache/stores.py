"""Token stores: where one tensor stream ([batch, heads, tokens, dim] or [batch, tokens, dim])
of a cache layer lives. The token axis is -2 everywhere.

A store owns exactly what it keeps: tokens cut from a larger tensor (the prompt's
projection, a quantized run) are copied, never kept as views that pin the base. The
tensors are torch's or numpy's (kvscribe.arrays): a store keeps what it is given.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kvscribe.arrays import cat, held_bytes, owned, rows_reordered
from kvscribe.kvcache.quant import Quantized, concat, dequantize, quantize


class TensorStore:
    """Tokens kept as they are."""

    def __init__(self) -> None:
        self.data: Any = None

    def __len__(self) -> int:
        return 0 if self.data is None else self.data.shape[-2]

    def tensors(self) -> Iterator[Any]:
        if self.data is not None:
            yield self.data

    @property
    def held_bytes(self) -> int:
        return held_bytes(self.tensors())

    def append(self, x) -> None:
        self.data = owned(x) if self.data is None else cat([self.data, x], axis=-2)

    def drop_oldest(self, n: int) -> None:
        if n <= 0 or self.data is None:
            return
        self.data = owned(self.data[..., n:, :]) if n < len(self) else None

    def read(self) -> Any:
        return self.data

    def select_batch(self, index) -> None:
        if self.data is not None:
            self.data = rows_reordered(self.data, index)  # the store's own array


class QuantizedStore:
    """Older tokens in Q8_0/Q4_0 blocks, the newest `residual` in full precision.

    The blocks of all quantized tokens live in one tensor pair (token axis -3 of
    `Quantized.data`), so reading and accounting cost the same at any length.
    """

    def __init__(self, kind: str, residual: int) -> None:
        self.kind = kind
        self.residual = residual
        self.blocks: Quantized | None = None
        self.recent = TensorStore()
        self.dtype: Any = None

    @property
    def quantized_tokens(self) -> int:
        return 0 if self.blocks is None else self.blocks.data.shape[-3]

    def __len__(self) -> int:
        return self.quantized_tokens + len(self.recent)

    def tensors(self) -> Iterator[Any]:
        if self.blocks is not None:
            yield from self.blocks.tensors()
        yield from self.recent.tensors()

    @property
    def held_bytes(self) -> int:
        return held_bytes(self.tensors())

    def append(self, x) -> None:
        self.dtype = x.dtype
        self.recent.append(x)
        overflow = len(self.recent) - self.residual
        if overflow > 0:
            fresh = quantize(self.recent.data[..., :overflow, :], self.kind)
            self.blocks = fresh if self.blocks is None else concat(self.blocks, fresh)
            self.recent.drop_oldest(overflow)

    def drop_oldest(self, n: int) -> None:
        if n <= 0:
            return
        dropped = min(n, self.quantized_tokens)
        if dropped == self.quantized_tokens:
            self.blocks = None
        elif dropped:
            b = self.blocks
            self.blocks = Quantized(
                b.kind, owned(b.data[..., dropped:, :, :]), owned(b.scale[..., dropped:, :, :])
            )
        self.recent.drop_oldest(n - dropped)

    def read(self) -> Any:
        parts = [] if self.blocks is None else [dequantize(self.blocks, self.dtype)]
        if self.recent.data is not None:
            parts.append(self.recent.data)
        return cat(parts, axis=-2) if len(parts) > 1 else (parts[0] if parts else None)

    def select_batch(self, index) -> None:
        if self.blocks is not None:
            b = self.blocks
            data, scale = rows_reordered(b.data, index), rows_reordered(b.scale, index)
            self.blocks = Quantized(b.kind, data, scale)
        self.recent.select_batch(index)
