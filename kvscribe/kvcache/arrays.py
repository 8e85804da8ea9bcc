"""The few array operations the cache policies need, for torch tensors and numpy arrays.

The policies (kvscribe/kvcache: sink and window trimming, Q8_0/Q4_0 storage, per-beam or
shared cross-attention copies, held-storage accounting) are written once against these
functions, so an engine that keeps its cache in numpy arrays (the ONNX Runtime graphs,
kvscribe/onnx) gets every policy the torch engine has without copying them. Each function
picks its implementation by the type of the array it is given; torch is imported only
for torch tensors, so a numpy engine runs without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def is_numpy(x) -> bool:
    return isinstance(x, np.ndarray)


def cat(parts: Sequence, axis: int):
    """`parts` joined along `axis` (all of one kind)."""
    if is_numpy(parts[0]):
        return np.concatenate(parts, axis=axis)
    import torch

    return torch.cat(list(parts), dim=axis)


def take_rows(x, rows):
    """Rows `rows` (a list, an int64 numpy array or a torch index tensor) of `x`, as a new
    array: beams kept, candidates fanned out, chunks dropped."""
    if is_numpy(x):
        return np.take(x, np.asarray(rows, dtype=np.int64), axis=0)
    import torch

    if not isinstance(rows, torch.Tensor):
        rows = torch.as_tensor(np.asarray(rows, dtype=np.int64), device=x.device)
    return x.index_select(0, rows)


def repeat_rows(x, times: int):
    """Each row `times` times in a row (a copy per beam)."""
    if is_numpy(x):
        return np.repeat(x, times, axis=0)
    return x.repeat_interleave(times, dim=0)


def owned(x):
    """A contiguous array with memory of its own, exactly the size of `x`: slicing a token
    range out of a projection gives a view that pins the whole projection; a store keeps
    `owned(slice)` instead."""
    if is_numpy(x):
        return np.array(x, copy=True, order="C")
    import torch

    return x.clone(memory_format=torch.contiguous_format)


def held_bytes(arrays: Iterable) -> int:
    """Sum of the distinct memory blocks behind `arrays` (one shared by views counts once):
    a view's `nbytes` counts only the elements it shows, and the whole block stays held."""
    sizes: dict[tuple[str, int], int] = {}
    for x in arrays:
        if is_numpy(x):
            base = x
            while isinstance(base.base, np.ndarray):
                base = base.base
            sizes[("numpy", base.__array_interface__["data"][0])] = base.nbytes
        else:
            storage = x.untyped_storage()
            sizes[(str(x.device), storage.data_ptr())] = storage.nbytes()
    return sum(sizes.values())
