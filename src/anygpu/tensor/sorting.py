"""Sorting and searching: sort, argsort, topk, unique, bincount, bucketize, searchsorted."""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..dtypes import float32, int32, int64
from ..ops import gpu

from .core import Tensor, _dim, _is_int
from .creation import tensor, zeros
from .elementwise import _cast, _compare, _float_operand, _int_operand, _to_tensor
from .indexing import gather
from .shape import _moved_back, _moved_last
from .reductions import _reduce_sum


SortResult = namedtuple("SortResult", ["values", "indices"])


def sort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> SortResult:
    """Values and int64 indices sorted along dim (stable; NaN sorts as the largest)."""
    if x.ndim == 0:
        return SortResult(x.clone(), zeros((), dtype=int64))
    moved, d = _moved_last(x, dim, "sort")
    n = moved.shape[-1]
    rows = moved.numel() // n if n else 0
    keys = _float_operand(moved) if moved.dtype.is_floating_point else _int_operand(moved)
    order = Tensor(gpu().sort_rows(keys, rows, n, descending), moved.shape, int64)
    values = gather(moved, -1, order) if n else moved.clone()
    return SortResult(_moved_back(values, d, x.ndim), _moved_back(order, d, x.ndim))


def argsort(x: Tensor, dim: int = -1, descending: bool = False, stable: bool = False) -> Tensor:
    return sort(x, dim, descending).indices


def topk(x: Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> SortResult:
    """The k largest (or smallest) values along dim and their int64 indices, in order."""
    d = _dim("topk", dim, x.ndim)
    size = x.shape[d] if x.ndim else 1
    if not 0 <= k <= size:
        raise ValueError(f"topk: k={k} is out of range for dimension {d} of size {size}")
    values, indices = sort(x, d, descending=largest)
    if x.ndim == 0:
        return SortResult(values, indices)
    return SortResult(values.narrow(d, 0, k), indices.narrow(d, 0, k))


def unique(x: Tensor, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim=None):
    """The distinct values (sorted), read back to the host (the size depends on the data)."""
    if dim is not None:
        raise ValueError("unique: dim is not supported; unique over all elements only")
    values, inverse, counts = np.unique(x.numpy(), return_inverse=True, return_counts=True)
    out = [tensor(values, dtype=x.dtype)]
    if return_inverse:
        out.append(tensor(inverse.reshape(x.shape).astype(np.int64)))
    if return_counts:
        out.append(tensor(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(x: Tensor, weights=None, minlength: int = 0) -> Tensor:
    """Counts of each non-negative integer in a 1-D tensor (read back to the host)."""
    if x.ndim != 1 or not _is_int(x.dtype):
        raise ValueError(f"bincount: expects a 1-D integer tensor, got shape {x.shape} and dtype {x.dtype}")
    w = None if weights is None else weights.numpy()
    counts = np.bincount(x.numpy(), weights=w, minlength=minlength)
    return tensor(counts, dtype=int64 if weights is None else float32)


def bucketize(input: Tensor, boundaries: Tensor, out_int32: bool = False, right: bool = False) -> Tensor:
    """The index of the bucket of each input value among sorted 1-D boundaries, as torch
    (right=False: boundaries[i-1] < x <= boundaries[i]); counts on the GPU."""
    input = _to_tensor(input)
    below = _compare("ge" if right else "gt", input.unsqueeze(-1), boundaries)
    return _cast(_reduce_sum(below, -1, False), int32 if out_int32 else int64)


def searchsorted(sorted_sequence: Tensor, values, out_int32: bool = False, right: bool = False, side=None) -> Tensor:
    """Insertion indices of values into the last dim of sorted_sequence (left or right)."""
    right = right or side == "right"
    values = _to_tensor(values)
    if sorted_sequence.ndim == 1:
        return bucketize(values, sorted_sequence, out_int32, right)
    below = _compare("ge" if right else "gt", values.unsqueeze(-1), sorted_sequence.unsqueeze(-2))
    return _cast(_reduce_sum(below, -1, False), int32 if out_int32 else int64)
