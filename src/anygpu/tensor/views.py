"""Views: tensors that read and write another tensor's buffer, as torch's views do.

A view keeps in `_base` the tensor whose buffer holds its elements (never a view itself):
- a row-major view of the whole buffer (reshape, view, flatten, squeeze, unsqueeze,
  detach, .data of a contiguous tensor) is a plain Tensor whose `_buf` *is* the base's
  Buffer, so every op reads it exactly as it reads any tensor;
- any other view (slices, select, narrow, split, transpose, permute, expand, diagonal,
  unfold, as_strided) is a `StridedView`: `_view` holds its (strides, offset) in elements
  of the base's buffer, and reading its `_buf` gathers its elements into a new contiguous
  Buffer (one strided-gather kernel) at that moment, so it shows the base's current values.
In-place ops on a view write into the base's buffer (`inplace.py`). Each view op records
its backward against the tensor it was taken from, with geometry relative to that
tensor's row-major order (`rel`); the storage geometry (`layout`) only places elements."""

from __future__ import annotations

import weakref

import numpy as np

from ..autograd.rules import backward as rule
from ..ops import gpu
from ..ops.nd import contiguous_strides, numel

from .core import StridedView, Tensor, _dim
from .recording import _record, _view_host


def layout(x: Tensor) -> tuple[tuple, int]:
    """(strides, offset) of x's elements in its base's buffer (its own, for a non-view)."""
    view = x._view
    return view if view is not None else (tuple(contiguous_strides(x.shape)), 0)


def is_row_major(shape, strides) -> bool:
    """torch's is_contiguous: every dim of size > 1 has the row-major stride."""
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


_torch_contiguous = is_row_major  # (the name tensor.py had)


def new_view(x: Tensor, shape, strides, offset: int) -> Tensor:
    """A tensor of `shape` whose elements lie at (strides, offset) in x's base's buffer: a
    plain Tensor sharing the buffer when that is the whole buffer in row-major order, else
    a StridedView. Not recorded (the caller records the op)."""
    base = x if x._base is None else x._base
    shape = tuple(shape)
    # Also from a strided view whose order this undoes (a transpose of a transpose): then no gather
    if offset == 0 and numel(shape) == base.numel() and is_row_major(shape, strides) and (
            x._view is None or x.dtype is base.dtype):
        out = Tensor(x._buf if x._view is None else base._buf, shape, x.dtype)
    else:
        out = StridedView(base, shape, x.dtype, tuple(strides), offset)
    out._base = base
    if _untracked and not counts_versions(x):  # a view of a .data view is outside the counter too
        untracked(out)
    return out


# Views made by ops that return several (split, chunk, unbind): torch refuses in-place ops on
# them while they are in a graph. id(view) -> (weak reference to it, the op's name); by id,
# as Tensor's == is elementwise.
_multi_output: dict = {}


def multi_output_views(pieces, op: str) -> tuple:
    for piece in pieces:
        if piece._base is not None:
            key = id(piece)
            _multi_output[key] = (weakref.ref(piece, lambda _, key=key: _multi_output.pop(key, None)), op)
    return tuple(pieces)


def check_multi_output(x: Tensor, op: str) -> None:
    """torch's refusal of an in-place op on one of several views an op returned, in a graph."""
    mark = _multi_output.get(id(x))
    made_by = mark[1] if mark is not None and mark[0]() is x else None
    if made_by is not None:
        raise RuntimeError(f"{op}: Output of {made_by} is a view and is being modified inplace. This view is the "
                           f"output of a function that returns multiple views. Such functions do not allow the "
                           f"output views to be modified inplace. You should replace the inplace operation by an "
                           f"out-of-place one.")


# `.data` views: torch does not count their in-place ops in the base's version counter.
# id(view) -> weak reference to it (by id: Tensor's == is elementwise).
_untracked: dict = {}


def untracked(view: Tensor) -> Tensor:
    key = id(view)
    _untracked[key] = weakref.ref(view, lambda _, key=key: _untracked.pop(key, None))
    return view


def counts_versions(view: Tensor) -> bool:
    """Whether an in-place op on `view` bumps its base's version counter."""
    mark = _untracked.get(id(view))
    return mark is None or mark() is not view


def detached(x: Tensor) -> Tensor:
    """x's data outside the graph: a view sharing x's buffer (detach(), .data)."""
    if x._view is None:
        out = Tensor(x._buf, x.shape, x.dtype)
        out._base = x if x._base is None else x._base
    else:  # (a StridedView's base is never a view)
        out = StridedView(x._base, x.shape, x.dtype, *x._view)
    if _untracked and not counts_versions(x):
        untracked(out)
    out._host = _view_host(x, x._host)
    return out


def _view_or_copy(op: str, x: Tensor, shape) -> Tensor:
    """x in `shape` as a view where torch makes one, else (reshape only) a copy; None for
    view() where no view exists."""
    if x._view is None:  # row-major already: always a view (sharing x's buffer)
        out = Tensor(x._buf, shape, x.dtype)
        out._base = x if x._base is None else x._base
        if _untracked and not counts_versions(x):
            untracked(out)
        out._host = _view_host(x, None if x._host is None else x._host.reshape(shape))
        return _record(op, out, (x,), rule("reshape", None))
    strides, offset = x._view
    new_strides = _view_strides(x.shape, strides, shape)
    if new_strides is None:
        if op == "view":
            raise ValueError(f"view: view size is not compatible with input tensor's size and stride (at least one "
                             f"dimension spans across two contiguous subspaces): shape {shape} from a tensor of size "
                             f"{x.shape} and strides {strides}; use .reshape(...) instead")
        return _record(op, Tensor(x._buf, shape, x.dtype), (x,), rule("reshape", None))  # a copy, as torch
    return _record(op, new_view(x, shape, new_strides, offset), (x,), rule("reshape", None))


def _target_shape(op: str, x: Tensor, shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"{op}: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = numel(s for s in shape if s != -1)
        if known == 0 or x.numel() % known:
            raise ValueError(f"{op}: shape {shape} is invalid for input of size {x.numel()} (shape {x.shape})")
        shape = tuple(x.numel() // known if s == -1 else s for s in shape)
    if numel(shape) != x.numel() or any(s < 0 for s in shape):
        raise ValueError(f"{op}: shape {shape} is invalid for input of size {x.numel()} (shape {x.shape})")
    return shape


def reshape(x: Tensor, shape) -> Tensor:
    """x in `shape`: a view when x's strides allow one, else a copy (torch's reshape)."""
    return _view_or_copy("reshape", x, _target_shape("reshape", x, shape))


def view(x: Tensor, shape) -> Tensor:
    """x in `shape`, always a view (ValueError where x's strides allow none, as torch)."""
    return _view_or_copy("view", x, _target_shape("view", x, shape))


def _view_strides(shape, strides, new_shape):
    """The strides of `new_shape` viewing memory laid out as (shape, strides), or None when
    no view exists (torch's rule: each group of old dims merged or split must be
    contiguous within itself). Size-1 dims take torch's strides."""
    if numel(shape) == 0:
        return tuple(contiguous_strides(new_shape))
    old = [(size, stride) for size, stride in zip(shape, strides) if size != 1]
    new = list(new_shape)
    out = [1] * len(new)
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        new_size, old_size = new[ni], old[oi][0]
        nj, oj = ni + 1, oi + 1
        while new_size != old_size:
            if new_size < old_size:
                new_size *= new[nj]
                nj += 1
            else:
                old_size *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        oi, ni = oj, nj
    for k in range(len(new) - 1, -1, -1):  # trailing size-1 dims: the stride after them, as torch
        if k >= ni:
            out[k] = out[k + 1] * new[k + 1] if k + 1 < len(new) else 1
    return tuple(out)


def squeezed(x: Tensor, dims) -> Tensor:
    """x without the size-1 dims in `dims` (a view)."""
    if not dims:
        return x  # nothing to squeeze
    keep = [d for d in range(x.ndim) if d not in dims]
    shape = tuple(x.shape[d] for d in keep)
    if x._view is None:
        return _view_or_copy("reshape", x, shape)
    strides, offset = x._view
    out = new_view(x, shape, tuple(strides[d] for d in keep), offset)
    return _record("reshape", out, (x,), rule("reshape", None))


def unsqueezed(x: Tensor, dim: int) -> Tensor:
    """x with a size-1 dim at `dim` (a view; its stride as torch's)."""
    shape = x.shape[:dim] + (1,) + x.shape[dim:]
    if x._view is None:
        return _view_or_copy("reshape", x, shape)
    strides, offset = x._view
    stride = strides[dim] * x.shape[dim] if dim < x.ndim else 1
    out = new_view(x, shape, strides[:dim] + (stride,) + strides[dim:], offset)
    return _record("reshape", out, (x,), rule("reshape", None))


def permute(x: Tensor, dims) -> Tensor:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(_dim("permute", d, x.ndim) for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"permute: dims {dims} are not a permutation of {x.ndim} dims")
    if dims == tuple(range(x.ndim)):
        return x
    strides, offset = layout(x)
    out = new_view(x, tuple(x.shape[d] for d in dims), tuple(strides[d] for d in dims), offset)
    return _record("permute", out, (x,), rule("permute", gpu(), x.shape, dims))


def expand(x: Tensor, shape) -> Tensor:
    pad = len(shape) - x.ndim
    if pad < 0:
        raise ValueError(f"expand: shape {tuple(shape)} has fewer dims than the tensor of shape {x.shape}")
    asked = tuple(shape)
    shape = tuple(x.shape[i - pad] if s == -1 and i >= pad else s for i, s in enumerate(asked))
    if any(s < 0 or (d >= pad and x.shape[d - pad] not in (1, s)) for d, s in enumerate(shape)):
        raise ValueError(f"expand: cannot expand shape {x.shape} to {asked}")
    if shape == x.shape:
        out = detached(x) if x._view is None else new_view(x, x.shape, *x._view)
        out._host = None
        return _record("expand", out, (x,), rule("reshape", None))
    strides, offset = layout(x)
    new_strides = (0,) * pad + tuple(0 if old == 1 and new != 1 else st
                                     for old, new, st in zip(x.shape, shape[pad:], strides))
    out = new_view(x, shape, new_strides, offset)
    return _record("expand", out, (x,), rule("expand", gpu(), x.shape, shape))


def strided_view(op: str, x: Tensor, shape, geometry, overlapping: bool = False) -> Tensor:
    """The view of x that `geometry(strides, offset) -> (strides, offset)` selects, applied
    to x's layout (where its elements lie) and to x's row-major order (what its backward
    scatters into): a strided scatter of the gradient, or a scatter-add where positions may
    repeat (`overlapping`)."""
    shape = tuple(shape)
    rel_strides, rel_offset = geometry(tuple(contiguous_strides(x.shape)), 0)
    out = new_view(x, shape, *geometry(*layout(x)))
    dev = gpu()
    if overlapping:
        positions = np.full(shape, rel_offset, dtype=np.int64)
        for k, (n, st) in enumerate(zip(shape, rel_strides)):
            positions = positions + (np.arange(n, dtype=np.int64) * st).reshape((1,) * k + (n,) + (1,) * (len(shape) - k - 1))
        index = dev.upload(positions.reshape(-1).astype(np.int32))
        backward = rule("gather", dev, index, 1, x.numel(), positions.size, 1)
    else:
        backward = rule("getitem", dev, x.numel(), shape, tuple(rel_strides), rel_offset)
    return _record(op, out, (x,), backward)


def diagonal(x: Tensor, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
    d1, d2 = _dim("diagonal", dim1, x.ndim), _dim("diagonal", dim2, x.ndim)
    if d1 == d2:
        raise ValueError(f"diagonal: dim1 and dim2 cannot be the same dimension, got {dim1} and {dim2}")
    rows, cols = x.shape[d1], x.shape[d2]
    length = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
    keep = [d for d in range(x.ndim) if d not in (d1, d2)]
    shape = tuple(x.shape[d] for d in keep) + (length,)

    def geometry(strides, start):
        if length:
            start += offset * strides[d2] if offset >= 0 else -offset * strides[d1]
        return tuple(strides[d] for d in keep) + (strides[d1] + strides[d2],), start
    return strided_view("diagonal", x, shape, geometry)


def unfold(x: Tensor, dimension: int, size: int, step: int) -> Tensor:
    """Windows of `size` elements every `step` along dimension, as a new last dimension."""
    if step < 1:
        raise ValueError(f"unfold: step must be positive, got {step}")
    length = x.shape[_dim("unfold", dimension, x.ndim)] if x.ndim else 1
    if size < 0 or size > length:
        raise ValueError(f"unfold: size must be in [0, {length}] (the length of dimension {dimension}), got {size}")
    if x.ndim == 0:
        return strided_view("unfold", x, (size,), lambda strides, start: ((1,), start))
    d = _dim("unfold", dimension, x.ndim)
    count = (length - size) // step + 1
    shape = x.shape[:d] + (count,) + x.shape[d + 1:] + (size,)

    def geometry(strides, start):
        return tuple(strides[:d]) + (strides[d] * step,) + tuple(strides[d + 1:]) + (strides[d],), start
    return strided_view("unfold", x, shape, geometry, overlapping=step < size)


def as_strided(x: Tensor, size, stride, storage_offset=None) -> Tensor:
    """torch's as_strided: the elements of x's storage (its base's buffer) at (stride,
    storage_offset); storage_offset defaults to x's own. Positions may repeat (their
    gradients add up); the gradient goes to the storage's tensor when x is a strided view."""
    size, stride = tuple(int(v) for v in size), tuple(int(v) for v in stride)
    source = x if x._view is None else x._base
    offset = layout(x)[1] if storage_offset is None else int(storage_offset)
    if len(size) != len(stride):
        raise ValueError(f"as_strided: size {size} and stride {stride} must have the same length")
    if min(size + stride + (offset,), default=0) < 0:
        raise ValueError(f"as_strided: sizes, strides and offset must not be negative, got {size}, {stride}, {offset}")
    last = offset + sum((n - 1) * st for n, st in zip(size, stride))
    if numel(size) and last >= source.numel():
        raise ValueError(f"as_strided: size {size} and stride {stride} at offset {offset} reach element {last} "
                         f"of a tensor of {source.numel()} elements (the storage)")
    return strided_view("as_strided", source, size, lambda strides, start: (stride, offset), overlapping=True)


def regeometry(x: Tensor, shaped: Tensor) -> Tensor:
    """x takes the shape (and strides) of `shaped`, a view of x with the same elements in the
    same order (squeeze_, unsqueeze_): gradients are flat buffers in that order, so x's graph
    entry stays valid; views taken from x keep their own geometry."""
    if shaped is not x:
        x.shape = shaped.shape
        if x._view is not None:
            x._view = shaped._view
            if shaped._view is None:  # (now the whole buffer in row-major order)
                x.__class__ = Tensor
                x._buf = shaped._buf
        if x._host is not None:
            x._host = x._host.reshape(x.shape)
    return x
