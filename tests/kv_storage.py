"""Independent measures of what a KV cache holds, for the storage tests.

Nothing here calls the cache's own byte accounting: `reachable_storage_bytes` walks
every tensor reachable from an object through its attributes and containers, and
`nominal_bytes` is the arithmetic size of the tokens a layer's spec says it keeps.
"""

from __future__ import annotations

import types

import numpy as np
import torch

_LEAVES = (str, bytes, int, float, bool, type(None), torch.dtype, torch.device, np.dtype)


def reachable_storage_bytes(root: object) -> int:
    """Bytes of the distinct storages behind every tensor (torch) or array (numpy: its base
    buffer) reachable from `root`."""
    storages: dict[int, int] = {}
    visited: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in visited or isinstance(obj, _LEAVES):
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        elif isinstance(obj, np.ndarray):  # a view keeps its base's whole buffer alive
            if obj.base is None:
                storages[obj.ctypes.data] = obj.nbytes
            else:
                stack.append(obj.base)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, (types.FunctionType, types.MethodType, types.ModuleType, type)):
            continue
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return sum(storages.values())


def nominal_bytes(spec, stored: int, seen: int, batch: int, width: int, itemsize: int) -> int:
    """Size of exactly what a layer keeps: `stored` tokens of `width` values per stream.

    Half layers keep one input vector per token; KV layers keep K and V, their sink and
    newest `residual` body tokens in full precision and the rest in Q8_0/Q4_0 blocks.
    """
    if spec.half:
        return batch * stored * width * itemsize
    sink = min(spec.sink, seen)
    body = stored - sink
    exact = sink + (min(spec.residual, body) if spec.quant else body)
    block_bytes = {None: 0, "q8_0": 32 + 2, "q4_0": 16 + 2}[spec.quant]
    quantized = (stored - exact) * (width // 32) * block_bytes
    return 2 * batch * (exact * width * itemsize + quantized)
