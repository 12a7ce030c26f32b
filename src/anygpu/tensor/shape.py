"""Joining and rearranging: cat, stack, flip, roll, movedim, repeat_interleave, meshgrid,
diag, tril/triu."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..autograd.rules import backward as rule
from ..dtypes import promote
from ..ops import gpu
from ..ops.nd import contiguous_strides, numel

from .core import Tensor, _dim, bool_
from .recording import _record
from .creation import arange, tensor, zeros
from .elementwise import _cast, _to_tensor
from .views import expand, permute
from .indexing import getitem, index_select, where


def _triangle(x: Tensor, diagonal: int, lower: bool) -> Tensor:
    if x.ndim < 2:
        raise ValueError(f"{'tril' if lower else 'triu'}: expects at least 2 dims, got shape {x.shape}")
    rows, cols = x.shape[-2:]
    make = np.tril if lower else np.triu
    keep = tensor(make(np.ones((rows, cols), np.float32), int(diagonal)))
    return where(keep, x, 0.0 if x.dtype.is_floating_point else False if x.dtype is bool_ else 0)  # keeps the dtype


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """Join tensors along an existing dim (shapes must match elsewhere)."""
    tensors = [_to_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    first = tensors[0]
    d = _dim("cat", dim, first.ndim)
    for t in tensors[1:]:
        if t.ndim != first.ndim or t.shape[:d] != first.shape[:d] or t.shape[d + 1:] != first.shape[d + 1:]:
            raise ValueError(f"cat: shapes {first.shape} and {t.shape} differ outside dim {d}")
    out_dtype = first.dtype
    for t in tensors[1:]:
        out_dtype = promote(out_dtype, t.dtype)
    tensors = [t if t.dtype is out_dtype else _cast(t, out_dtype) for t in tensors]
    first = tensors[0]
    dev = gpu()
    total = sum(t.shape[d] for t in tensors)
    shape = first.shape[:d] + (total,) + first.shape[d + 1:]
    out_buf = dev.empty(numel(shape), first._buf.dtype)
    out_strides = contiguous_strides(shape)
    offsets, start = [], 0
    for t in tensors:
        offsets.append(start * out_strides[d])
        dev.strided_scatter(t._buf, out_buf, t.shape, out_strides, start * out_strides[d])
        start += t.shape[d]
    out = Tensor(out_buf, shape, first.dtype)

    return _record("cat", out, tuple(tensors), rule("cat", dev, [t.shape for t in tensors], out_strides, offsets))


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = [_to_tensor(t) for t in tensors]
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    for t in tensors[1:]:
        if t.shape != tensors[0].shape:
            raise ValueError(f"stack: all tensors must have the same shape, got {tensors[0].shape} and {t.shape}")
    d = _dim("stack", dim, tensors[0].ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], d)


def _moved_last(x: Tensor, dim: int, op: str) -> tuple[Tensor, int]:
    d = _dim(op, dim, x.ndim)
    return (x if d == x.ndim - 1 else x.transpose(d, -1)), d


def _moved_back(t: Tensor, d: int, ndim: int) -> Tensor:
    return t if d == ndim - 1 else t.transpose(d, -1)


def flip(x: Tensor, dims) -> Tensor:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    out = x
    for dim in dims:
        d = _dim("flip", dim, x.ndim)
        out = index_select(out, d, arange(x.shape[d] - 1, -1, -1))
    return out


def roll(x: Tensor, shifts, dims=None) -> Tensor:
    """Elements shifted along dims, wrapping around (flattened when dims is None)."""
    if dims is None:
        return roll(x.reshape(-1), shifts, 0).reshape(x.shape)
    shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if len(shifts) != len(dims):
        raise ValueError(f"roll: {len(shifts)} shifts for {len(dims)} dims")
    out = x
    for shift, dim in zip(shifts, dims):
        d = _dim("roll", dim, x.ndim)
        n = x.shape[d]
        if n:
            out = index_select(out, d, tensor((np.arange(n) - shift) % n))
    return out


def diag(x: Tensor, diagonal: int = 0) -> Tensor:
    """1-D -> a square matrix with x on a diagonal; 2-D -> that diagonal as 1-D."""
    k = int(diagonal)
    if x.ndim == 1:
        n = x.shape[0] + abs(k)
        out = zeros(n, n, dtype=x.dtype)
        rows = arange(x.shape[0]) + max(-k, 0)
        out[rows, rows + k] = x
        return out
    if x.ndim != 2:
        raise ValueError(f"diag: expects a 1-D or 2-D tensor, got shape {x.shape}")
    length = max(0, min(x.shape[0] + min(k, 0), x.shape[1] - max(k, 0)))
    rows = arange(length) + max(-k, 0)
    return getitem(x, (rows, rows + k))


def repeat_interleave(x: Tensor, repeats, dim=None) -> Tensor:
    """Each element (or slice along dim) repeated `repeats` times, in place of the original."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    d = _dim("repeat_interleave", dim, x.ndim)
    counts = repeats.numpy() if isinstance(repeats, Tensor) else repeats
    order = np.repeat(np.arange(x.shape[d]), counts)
    return index_select(x, d, tensor(order.astype(np.int64)))


def movedim(x: Tensor, source, destination) -> Tensor:
    source = (source,) if isinstance(source, int) else tuple(source)
    destination = (destination,) if isinstance(destination, int) else tuple(destination)
    source = [_dim("movedim", s, x.ndim) for s in source]
    destination = [_dim("movedim", s, x.ndim) for s in destination]
    rest = [k for k in range(x.ndim) if k not in source]
    order = [None] * x.ndim
    for s, t in zip(source, destination):
        order[t] = s
    fill = iter(rest)
    return permute(x, tuple(k if k is not None else next(fill) for k in order))


def meshgrid(*tensors, indexing: str = "ij"):
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    sizes = [t.numel() for t in tensors]
    if indexing == "xy" and len(tensors) >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for k, t in enumerate(tensors):
        place = k if indexing == "ij" or len(tensors) < 2 or k > 1 else 1 - k
        shape = [1] * len(tensors)
        shape[place] = t.numel()
        out.append(expand(t.reshape(tuple(shape)), tuple(sizes)))
    return tuple(out)


def cartesian_prod(*tensors) -> Tensor:
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1) if len(tensors) > 1 else tensors[0]
