"""The few array operations the decoding core needs, for torch tensors and numpy arrays.

The cache policies (kvscribe/kvcache: sink and window trimming, Q8_0/Q4_0 storage,
per-beam or shared cross-attention copies, held-storage accounting) and the search
(kvscribe/stepped: token rules, greedy and beam search) are written once against these
functions, so an engine that works in numpy arrays (the ONNX Runtime graphs,
backends/onnx) gets what the torch engine has without a copy of it. Each function picks
its implementation by the type of the array it is given, and does on torch exactly what
the torch code did before; torch is imported only for torch tensors, so a numpy engine
runs without it.
"""

from __future__ import annotations

import contextlib
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


def stack(parts: Sequence):
    """`parts` (all of one kind and shape) along a new first axis."""
    if is_numpy(parts[0]):
        return np.stack(parts)
    import torch

    return torch.stack(list(parts))


def take_rows(x, rows):
    """Rows `rows` (a list, an int64 numpy array or a torch index tensor) of `x`, as a new
    array: beams kept, candidates fanned out, chunks dropped."""
    if is_numpy(x):
        return np.take(x, np.asarray(rows, dtype=np.int64), axis=0)
    import torch

    if not isinstance(rows, torch.Tensor):
        rows = torch.as_tensor(np.asarray(rows, dtype=np.int64), device=x.device)
    return x.index_select(0, rows)


def rows_reordered(x, rows):
    """take_rows(x, rows) for an array the caller owns and gives up, in place when `rows` is
    a reordering of as many rows (a beam-search step moves about a quarter of its rows, none
    a fifth of the time, where take_rows copies the whole cache every step). Fewer rows are
    copied out, so the memory of the dropped ones is let go at once."""
    count = len(rows)
    if count == x.shape[0] and _in_place(x):
        return _moved_to_front(x, rows)
    return take_rows(x, rows)


def rows_kept(x, rows):
    """take_rows(x, rows) for an array the caller owns and gives up, in place: the rows are
    moved to the front and the first len(rows) returned, a view that keeps the whole block
    held (and counted by held_bytes) until the array goes. For a store whose footprint
    peaked when it was filled (cross-attention K/V dropping finished chunks)."""
    if len(rows) <= x.shape[0] and _in_place(x):
        return _moved_to_front(x, rows)
    return take_rows(x, rows)


def _in_place(x) -> bool:
    """Whether rows of `x` may be moved in place: a writable numpy array, or a CPU tensor
    (on a device, finding the rows that move would wait for it)."""
    return x.flags.writeable if is_numpy(x) else x.device.type == "cpu"


def _moved_to_front(x, rows):
    """x[:len(rows)] = x[rows], copying only the rows that move."""
    if is_numpy(x):
        rows = np.asarray(rows, dtype=np.int64)
        moved = np.flatnonzero(rows != np.arange(rows.shape[0]))
        if moved.size:
            x[moved] = x[rows[moved]]  # the moving rows are read before any is written
        return x[: rows.shape[0]]
    import torch

    rows = rows if torch.is_tensor(rows) else torch.as_tensor(np.asarray(rows, dtype=np.int64))
    moved = torch.nonzero(rows != torch.arange(rows.numel())).flatten()
    if moved.numel():
        x[moved] = x.index_select(0, rows[moved])
    return x[: rows.numel()]


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


def unviewed(x):
    """`x` itself when it is a numpy array holding exactly its own contiguous memory (a fresh
    result: no view pinning more), else owned(x). For a store handed arrays no one writes
    to afterwards (an encoder graph's K/V), which it may then share instead of copying."""
    if is_numpy(x) and x.flags.owndata and x.flags.c_contiguous:
        return x
    return owned(x)


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


# -- the search's operations ------------------------------------------------------------------


def inference(device) -> contextlib.AbstractContextManager:
    """Where a search runs: torch's inference mode for a torch device (its decoder's
    outputs are inference tensors, which the rules mask in place), else nothing."""
    if device is None:
        return contextlib.nullcontext()
    import torch

    return torch.inference_mode()


def tokens(rows: list[list[int]], device):
    """Token ids [rows, n] for the decoder: int64 numpy when `device` is None, else a torch
    tensor on `device`."""
    if device is None:
        return np.asarray(rows, dtype=np.int64)
    import torch

    return torch.tensor(rows, device=device)


def index(rows: list[int], device):
    """Row indices: int64 numpy when `device` is None, else a torch tensor on `device`."""
    if device is None:
        return np.asarray(rows, dtype=np.int64)
    import torch

    return torch.tensor(rows, dtype=torch.long, device=device)


def bool_mask(size: int, device):
    if device is None:
        return np.zeros(size, dtype=bool)
    import torch

    return torch.zeros(size, dtype=torch.bool, device=device)


def float32(x):
    """`x` in float32 (itself when it already is, as torch's `.float()`)."""
    if is_numpy(x):
        return x if x.dtype == np.float32 else x.astype(np.float32)
    return x.float()


def mask_(x, mask, value: float):
    """Set `x` to `value` where `mask` (broadcast over rows) is true, in place."""
    if is_numpy(x):
        if mask.ndim == 1:  # columns: write those (the timestamps, a few suppressed
            x[..., np.flatnonzero(mask)] = value  # tokens), not a pass over all of x
        else:
            np.copyto(x, np.asarray(value, dtype=x.dtype), where=np.broadcast_to(mask, x.shape))
        return x
    return x.masked_fill_(mask, value)


def log_softmax(x):
    """Along the last axis."""
    if is_numpy(x):
        return x - logsumexp(x)[..., None]
    import torch

    return torch.log_softmax(x, dim=-1)


def softmax(x):
    """Along the last axis."""
    if is_numpy(x):
        return np.exp(log_softmax(x))
    import torch

    return torch.softmax(x, dim=-1)


def logsumexp(x):
    """Along the last axis."""
    if is_numpy(x):
        top = x.max(axis=-1, keepdims=True)
        top = np.where(np.isfinite(top), top, 0)
        exp = np.subtract(x, top)  # one buffer of x's size: fresh pages cost as much as the math
        np.exp(exp, out=exp)
        with np.errstate(divide="ignore"):
            return (np.log(exp.sum(axis=-1, keepdims=True)) + top)[..., 0]
    import torch

    return torch.logsumexp(x, dim=-1)


def row_max(x):
    """The largest value of each row (last axis)."""
    if is_numpy(x):
        return x.max(axis=-1)
    return x.max(dim=-1).values


def true_rows(flags) -> list[int]:
    """Indices where a 1-D boolean array is true."""
    if is_numpy(flags):
        return np.flatnonzero(flags).tolist()
    import torch

    return torch.nonzero(flags).flatten().tolist()


def topk(x, k: int):
    """The `k` largest values of each row and their indices, largest first."""
    if is_numpy(x):
        some = _largest_columns(x, k)  # the k largest, unordered
        values = np.take_along_axis(x, some, axis=-1)
        order = np.argsort(-values, axis=-1, kind="stable")
        return np.take_along_axis(values, order, axis=-1), np.take_along_axis(some, order, axis=-1)
    return x.topk(k, dim=-1)


_CLASS_SIZE = 64


def _largest_columns(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` largest values of each row (unordered), as an argpartition of the
    whole row would find them, partitioning only a few hundred candidates.

    With width = columns // 64, class j holds the 64 columns j, j + width, j + 2 * width, ...
    The k classes with the largest maxima hold all of the row's k largest values (each of
    them lies in a class whose maximum is at least the k-th largest, and a class whose
    maximum exceeds it holds one of the larger ones), so their columns and the few past the
    last class are the candidates. At Whisper's vocabulary the class maxima are one
    vectorised pass, and ~400 candidates are partitioned instead of ~52,000.
    """
    rows, columns = x.shape[0], x.shape[-1]
    width = columns // _CLASS_SIZE
    if x.ndim != 2 or width < 4 * k:
        return np.argpartition(x, -k, axis=-1)[..., -k:]
    whole = width * _CLASS_SIZE
    maxima = x[:, :whole].reshape(rows, _CLASS_SIZE, width).max(axis=1)  # [rows, width]
    classes = np.argpartition(maxima, -k, axis=-1)[:, -k:]
    members = classes[:, :, None] + width * np.arange(_CLASS_SIZE)
    past = np.broadcast_to(np.arange(whole, columns), (rows, columns - whole))
    candidates = np.concatenate([members.reshape(rows, -1), past], axis=1)
    values = np.take_along_axis(x, candidates, axis=-1)
    return np.take_along_axis(candidates, np.argpartition(values, -k, axis=-1)[:, -k:], axis=-1)


def first_row_repeated(x, times: int):
    """[1, n] -> [times, n]."""
    if is_numpy(x):
        return np.repeat(x, times, axis=0)
    return x.repeat(times, 1)


def draw(probabilities, generator):
    """One index per row of `probabilities` [rows, n], drawn with `generator` (torch's for a
    tensor, numpy's for an array), as a 1-D array of the same kind."""
    if is_numpy(probabilities):
        cumulative = np.cumsum(probabilities, axis=-1, dtype=np.float64)
        targets = generator.random(len(cumulative)) * cumulative[:, -1]
        picked = (cumulative < targets[:, None]).sum(axis=-1)
        return np.minimum(picked, probabilities.shape[-1] - 1)
    import torch

    return torch.multinomial(probabilities, 1, generator=generator).flatten()


def at_columns(x, columns):
    """x[row, columns[row]] for every row, as a 1-D array."""
    if is_numpy(x):
        return np.take_along_axis(x, np.asarray(columns)[:, None], axis=-1)[:, 0]
    return x.gather(1, columns[:, None]).flatten()
