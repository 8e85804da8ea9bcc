"""Bytes a set of tensors keeps alive: their distinct storages, each counted once.

A view's `nbytes` counts only the elements it shows; the allocator keeps the whole
storage behind it. A cache figure must be what is actually held, so every byte figure
of the kvcache package goes through `held_bytes`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def held_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Sum of the distinct storages behind `tensors` (a storage shared by views counts once)."""
    sizes: dict[tuple[str, int], int] = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        sizes[(str(tensor.device), storage.data_ptr())] = storage.nbytes()
    return sum(sizes.values())


def owned(x: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor with a storage of its own, exactly the size of `x`.

    Slicing a token range out of a projection gives a view that pins the whole
    projection; a store keeps `owned(slice)` instead.
    """
    return x.clone(memory_format=torch.contiguous_format)
