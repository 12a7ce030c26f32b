"""Indexing: basic and advanced getitem/setitem, gather, index_select, scatter, where, nonzero."""

from __future__ import annotations

import operator


import numpy as np

from ..autograd.rules import backward as rule
from ..dtypes import int64
from ..ops import gpu
from ..ops.nd import broadcast_shapes, contiguous_strides, numel

from .core import Tensor, _dim, _is_int, bool_
from .recording import _record
from .creation import arange, full, tensor
from .elementwise import _as_float, _cast, _compare, _float_operand, _int_binary, _result_dtype, _to_tensor
from .views import expand, layout, new_view
from .inplace import _inplace


def _as_tuple(index) -> tuple:
    """The index as a tuple of items, as torch reads it: a list (not a tuple) that holds a
    sequence, slice, None or Ellipsis is read as a tuple (NumPy's old rule, kept by torch)."""
    if isinstance(index, tuple):
        return index
    if isinstance(index, list) and any(isinstance(i, (list, tuple, np.ndarray, Tensor, slice, range))
                                       or i is None or i is Ellipsis for i in index):
        return tuple(index)
    return (index,)


def _index_array(item) -> Tensor:
    """A list, range or NumPy array as an index tensor (int64, or bool for a mask)."""
    values = np.asarray(item)
    if values.size == 0 and values.dtype.kind not in "biu":
        values = values.astype(np.int64)  # [] selects nothing, with an integer index
    if values.dtype.kind not in "biu":
        raise IndexError(f"indexing: tensors used as indices must be long, int, byte or bool tensors, got an "
                         f"array of {values.dtype}")
    return tensor(values if values.dtype.kind == "b" else values.astype(np.int64))


def _expand_index(x: Tensor, index) -> tuple:
    """An index as a tuple of items that covers x's dims: ints, slices, None, and integer
    Tensors (lists, ranges and arrays become tensors; a bool mask over k dims becomes the k
    integer tensors of its nonzero positions, read back as torch does); Ellipsis filled
    in; a bool scalar is a new dim of size 1 (True) or 0 (False, see getitem)."""
    items = []
    for item in _as_tuple(index):
        if isinstance(item, (list, range, np.ndarray, Tensor)) and not (isinstance(item, np.ndarray) and item.ndim == 0):
            t = item if isinstance(item, Tensor) else _index_array(item)
            if t.dtype is bool_:
                if t.ndim == 0:
                    items.append(None if bool(t.item()) else False)
                    continue
                items.append(_MaskDims(t, [tensor(p.astype(np.int64)) for p in np.nonzero(t.numpy())]))
                continue
            if t.dtype.is_floating_point:
                raise IndexError(f"indexing: tensors used as indices must be long, int, byte or bool tensors, "
                                 f"got {t.dtype}")
            items.append(t)
        elif item is None or item is Ellipsis or isinstance(item, slice):
            items.append(item)
        elif isinstance(item, (bool, np.bool_)):
            items.append(None if item else False)
        else:
            try:
                items.append(operator.index(item))
            except TypeError:
                raise IndexError(f"indexing: only integers, slices (`:`), ellipsis (`...`), None and long or byte "
                                 f"Variables are valid indices, got {type(item).__name__} {item!r}") from None
    n_ellipsis = sum(i is Ellipsis for i in items)
    if n_ellipsis > 1:
        raise IndexError("indexing: an index can only have a single ellipsis ('...')")
    n_real = sum(len(i.tensors) if isinstance(i, _MaskDims) else i is not None and i is not Ellipsis
                 and i is not False for i in items)
    if n_real > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if n_ellipsis:
        pos = next(k for k, item in enumerate(items) if item is Ellipsis)  # not .index: Tensor == is elementwise
        items = items[:pos] + [slice(None)] * (x.ndim - n_real) + items[pos + 1:]
    else:
        items = items + [slice(None)] * (x.ndim - n_real)
    flat, d = [], 0
    for item in items:
        if isinstance(item, _MaskDims):
            mask_shape = item.mask.shape
            if mask_shape != x.shape[d:d + len(mask_shape)]:
                at = next(k for k in range(len(mask_shape)) if mask_shape[k] != x.shape[d + k])
                raise IndexError(f"The shape of the mask {list(mask_shape)} at index {at} does not match the shape "
                                 f"of the indexed tensor {list(x.shape)} at index {d + at}")
            flat.extend(item.tensors)
            d += len(item.tensors)
        else:
            flat.append(item)
            d += item is not None and item is not False
    return tuple(flat)


class _MaskDims:
    """The index tensors a bool mask expands to (they cover consecutive dims)."""

    def __init__(self, mask: Tensor, tensors):
        self.mask = mask
        self.tensors = list(tensors)


def _basic_view(x: Tensor, items, layout=None) -> tuple[tuple, list, int]:
    """(shape, strides, offset) of the view that ints, slices and None select from x laid
    out as `layout` = (strides, offset) (default: row-major from 0). A None dim takes
    torch's stride (the next dim's extent, 1 at the end)."""
    base, offset = layout if layout is not None else (contiguous_strides(x.shape), 0)
    shape, strides, d = [], [], 0
    for item in items:
        if item is None or item is False:  # a new dim: None (and True) of size 1, False of size 0
            shape.append(0 if item is False else 1)
            strides.append(None)
            continue
        size = x.shape[d]
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            if step <= 0:
                raise ValueError("indexing: step must be greater than zero")
            length = max(0, -(-(stop - start) // step))
            offset += start * base[d]
            shape.append(length)
            strides.append(base[d] * step)
        else:
            i = int(item)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {d} with size {size}")
            offset += (i % size) * base[d]
        d += 1
    after = 1
    for k in range(len(strides) - 1, -1, -1):
        if strides[k] is None:
            strides[k] = after
        else:
            after = strides[k] * shape[k]
    return tuple(shape), strides, offset


def _flat_positions(x: Tensor, items) -> Tensor:
    """The flat position in x of every element an index with tensor items selects: an
    integer tensor of the result's shape, computed on the integer kernels (torch's rules:
    the broadcast index tensors make one block of dims, in place when they are adjacent,
    first otherwise)."""
    base = contiguous_strides(x.shape)
    dims, d = [], 0  # (item, dim of x or None)
    for item in items:
        dims.append((item, None if item is None else d))
        d += item is not None
    # torch applies int indices first (they drop their dim), so only tensors are advanced
    # and ints between them do not separate them (numpy differs here).
    order = [k for k, (item, _) in enumerate(dims) if not isinstance(item, int)]
    advanced = [k for k in order if isinstance(dims[k][0], Tensor)]
    tensors = [dims[k][0] for k in advanced if isinstance(dims[k][0], Tensor)]
    block = broadcast_shapes("indexing", *(t.shape for t in tensors))
    first, last = order.index(advanced[0]), order.index(advanced[-1])
    adjacent = advanced == order[first:last + 1]
    out_shape, slots, block_at = [], [], None  # slots: (item, dim, result position)
    if not adjacent:
        block_at = 0
        out_shape.extend(block)
    for k, (item, dim) in enumerate(dims):
        if isinstance(item, int):
            slots.append((item, dim, None))
        elif k in advanced:
            if block_at is None:
                block_at = len(out_shape)
                out_shape.extend(block)
            slots.append((item, dim, block_at))
        elif item is None:
            out_shape.append(1)
        else:
            slots.append((item, dim, len(out_shape)))
            out_shape.append(len(range(*item.indices(x.shape[dim]))))
    out_shape, rank = tuple(out_shape), len(out_shape)
    positions, offset = None, 0
    for item, dim, at in slots:
        size, stride = x.shape[dim], base[dim]
        if isinstance(item, int):
            if not -size <= item < size:
                raise IndexError(f"indexing: index {item} is out of bounds for dimension {dim} with size {size}")
            offset += (item % size) * stride
            continue
        if isinstance(item, slice):
            part = arange(*item.indices(size)).reshape((1,) * at + (-1,) + (1,) * (rank - at - 1))
        else:
            _check_index_range("indexing", item, size, dim)
            wrapped = _int_binary("add", item, _int_binary("mul", _compare("lt", item, 0), size, int64), int64)
            lead = len(block) - item.ndim
            part = wrapped.reshape((1,) * (at + lead) + item.shape + (1,) * (rank - at - len(block)))
        part = _int_binary("mul", part, stride, int64)
        positions = part if positions is None else _int_binary("add", positions, part, int64)
    if positions is None:
        positions = full((), 0, dtype=int64)
    if offset:
        positions = _int_binary("add", positions, offset, int64)
    return positions if positions.shape == out_shape else _own_buffer(expand(positions, out_shape))


def _has_tensor_items(items) -> bool:
    if any(isinstance(item, Tensor) for item in items):
        if any(item is False for item in items):
            raise IndexError("indexing: a False index together with index tensors is not supported")
        return True
    return False


def getitem(x: Tensor, index) -> Tensor:
    """Indexing as torch: ints, slices (positive steps), None, Ellipsis, and advanced
    indices (integer tensors or lists of any rank, bool masks)."""
    items = _expand_index(x, index)
    dev = gpu()
    if _has_tensor_items(items):
        positions = _flat_positions(x, items)
        n = positions.numel()
        out = Tensor(dev.gather_axis(x._buf, positions._buf, 1, x.numel(), n, 1), positions.shape, x.dtype)

        return _record("index", out, (x,), rule("gather", dev, positions._buf, 1, x.numel(), n, 1))
    shape, strides, offset = _basic_view(x, items)
    out = new_view(x, shape, *_basic_view(x, items, layout(x))[1:])  # a view: x's storage, not a copy
    return _record("getitem", out, (x,), rule("getitem", dev, x.numel(), shape, strides, offset))


def setitem(x: Tensor, index, value) -> None:
    """x[index] = value (a number or a tensor broadcast to the selection), in place with
    torch's autograd rules: recorded when x or value is in a graph, refused on a leaf that
    requires grad outside no_grad."""
    items = _expand_index(x, index)
    if isinstance(value, Tensor):
        if not value.dtype.is_floating_point or x.dtype.is_floating_point:
            value = value if value.dtype is x.dtype else _cast(value, x.dtype)
        else:
            raise ValueError(f"setitem: cannot write a {value.dtype} tensor into a {x.dtype} tensor")
    else:
        value = full((), value, dtype=x.dtype)
    dev = gpu()
    new_buf = dev.copy(x._buf)
    if _has_tensor_items(items):
        positions = _flat_positions(x, items)
        shape = positions.shape
        value = value if value.shape == shape else expand(value, shape)
        dev.index_put(new_buf, positions._buf, value._buf)
        backward = rule("index_put", dev, positions._buf, x.numel())
    else:
        shape, strides, offset = _basic_view(x, items)
        value = value if value.shape == shape else expand(value, shape)
        dev.strided_scatter(value._buf, new_buf, shape, strides, offset)
        backward = rule("setitem", dev, shape, strides, offset)
    out = _record("setitem", Tensor(new_buf, x.shape, x.dtype), (x, value), backward)
    _inplace(x, out, "setitem")


def nonzero(x: Tensor, as_tuple: bool = False):
    """The indices of nonzero elements: an int64 tensor [count, ndim], or one tensor per
    dim with as_tuple. Reads x back (the result's size depends on the data)."""
    found = np.nonzero(np.atleast_1d(x.numpy()))
    if as_tuple:
        return tuple(tensor(p.astype(np.int64)) for p in found)
    return tensor(np.stack(found, axis=1).astype(np.int64).reshape(-1, max(x.ndim, 1)))


def _index_tensor(op: str, index) -> Tensor:
    if not isinstance(index, Tensor):
        array = np.asarray(index)
        if array.dtype == np.bool_:
            raise ValueError(f"{op}: boolean-mask indexing is not supported (its size depends on the data); "
                             f"use where() or masked_fill()")
        index = tensor(array)
    if not _is_int(index.dtype):
        raise ValueError(f"{op}: index must be an integer tensor, got {index.dtype}")
    return _own_buffer(index)


def _own_buffer(t: Tensor) -> Tensor:
    """An integer tensor with a buffer of its own: a strided view's elements gathered once,
    for the kernels and the backward rule that both read them."""
    if t._view is None:
        return t
    out = Tensor(t._buf, t.shape, t.dtype)
    out._host = t._host
    return out


def _check_index_range(op: str, index: Tensor, size: int, dim: int, negative: bool = True) -> None:
    """Host-side bounds check (free where the index tensor keeps its host copy). With
    negative=False (gather, index_select: torch refuses negatives there) an index computed
    on the GPU is read back to be checked: wrapping it silently would be a wrong answer."""
    if index.numel() == 0:
        return
    host = index._host
    if host is None:
        if negative:
            return
        host = index.numpy()
    low, high = int(host.min()), int(host.max())
    if low < (-size if negative else 0) or high >= size:
        bad = low if low < (-size if negative else 0) else high
        raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with size {size}")


def gather(x: Tensor, dim: int, index) -> Tensor:
    """torch.gather: out[..., j, ...] = x[..., index[..., j, ...], ...] along dim.

    index has x's number of dims and sizes no larger than x's outside dim; the output
    has index's shape. The backward scatter-adds the gradient into x's positions."""
    index = _index_tensor("gather", index)
    d = _dim("gather", dim, x.ndim)
    if index.ndim != x.ndim:
        raise ValueError(f"gather: index has {index.ndim} dims (shape {index.shape}), expected {x.ndim} "
                         f"like the input of shape {x.shape}")
    if any(i > s for k, (i, s) in enumerate(zip(index.shape, x.shape)) if k != d):
        raise ValueError(f"gather: index of shape {index.shape} is larger than the input {x.shape} outside dim {d}")
    _check_index_range("gather", index, x.shape[d], d, negative=False)
    if any(i != s for k, (i, s) in enumerate(zip(index.shape, x.shape)) if k != d):
        x = getitem(x, tuple(slice(None) if k == d else slice(0, i) for k, i in enumerate(index.shape)))
    dev = gpu()
    outer, size, inner = numel(x.shape[:d]), x.shape[d], numel(x.shape[d + 1:])
    n_index = index.shape[d]
    out = Tensor(dev.gather_axis(x._buf, index._buf, outer, size, n_index, inner, per_element=True),
                 index.shape, x.dtype)

    return _record("gather", out, (x,),
                   rule("gather", dev, index._buf, outer, size, n_index, inner, per_element=True))


def index_select(x: Tensor, dim: int, index) -> Tensor:
    """The entries of x at positions `index` (1-D integers in [0, size)) along dim."""
    index = _index_tensor("index_select", index)
    d = _dim("index_select", dim, x.ndim)
    if index.ndim > 1:
        raise ValueError(f"index_select: index must be 0-D or 1-D, got shape {index.shape}")
    size = x.shape[d] if x.ndim else 1
    _check_index_range("index_select", index, size, d, negative=False)
    dev = gpu()
    outer, inner = numel(x.shape[:d]), numel(x.shape[d + 1:])
    n_index = index.numel()
    shape = x.shape[:d] + (n_index,) + x.shape[d + 1:] if x.ndim else (n_index,)
    out = Tensor(dev.gather_axis(x._buf, index._buf, outer, size, n_index, inner), shape, x.dtype)

    return _record("index_select", out, (x,), rule("index_select", dev, index._buf, outer, size, n_index, inner))


def where(condition, a=None, b=None) -> Tensor:
    """a where condition is nonzero, else b (broadcast together); where(condition) alone is
    nonzero(condition, as_tuple=True)."""
    if a is None and b is None:
        return nonzero(condition, as_tuple=True)
    out_dtype = _result_dtype(a, b)
    # a number beside a float64 tensor is float64 too (1e300 is not rounded to float32's inf)
    like = a if isinstance(a, Tensor) else b if isinstance(b, Tensor) else None
    condition, a, b = _to_tensor(condition), _to_tensor(a, like=like), _to_tensor(b, like=like)
    shape = broadcast_shapes("where", condition.shape, a.shape, b.shape)
    if not out_dtype.is_floating_point:  # exact integers: b + cond * (a - b) on the integer kernels
        pick = _cast(condition, int64)
        out = _int_binary("add", b, _int_binary("mul", pick, _int_binary("sub", a, b, int64), int64), int64)
        out = expand(out, shape) if out.shape != shape else out
        return _cast(out, out_dtype)
    dev = gpu()
    cond_full = expand(_as_float(condition).detach(), shape)._buf
    a_full = expand(a.detach(), shape)._buf if a.shape != shape else _float_operand(a)
    b_full = expand(b.detach(), shape)._buf if b.shape != shape else _float_operand(b)
    if a_full.dtype != b_full.dtype:  # an expanded operand keeps its dtype: both as the wider
        wide = "f64" if "f64" in (a_full.dtype, b_full.dtype) else "f32"
        a_full, b_full = (buf if buf.dtype == wide else dev.cast(buf, wide) for buf in (a_full, b_full))
    out = Tensor(dev.where(cond_full, a_full, b_full), shape)

    return _record("where", out, (a, b),
                   rule("where", dev, cond_full, a.shape, b.shape, shape, needs=(a.requires_grad, b.requires_grad)))


def scatter(x: Tensor, dim: int, index, src, add: bool = False) -> Tensor:
    """torch.scatter / scatter_add: out = x with out[..., index[i, j], ...] (along dim) set to
    (or, with add, increased by) src[i, j] for every position of index; src may be a number.
    Gradients: x's where not overwritten, src's gathered back from the written positions."""
    index = _index_tensor("scatter", index)
    d = _dim("scatter", dim, x.ndim)
    if index.ndim != x.ndim:
        raise ValueError(f"scatter: index has {index.ndim} dims (shape {index.shape}), expected {x.ndim} like "
                         f"the input of shape {x.shape}")
    _check_index_range("scatter", index, x.shape[d], d)
    if isinstance(src, Tensor):
        src = src if src.dtype is x.dtype else _cast(src, x.dtype)
        if any(i > s for i, s in zip(index.shape, src.shape)):
            raise ValueError(f"scatter: index of shape {index.shape} is larger than src of shape {src.shape}")
        if src.shape != index.shape:
            src = getitem(src, tuple(slice(0, n) for n in index.shape))
    else:
        src = full(index.shape, src, dtype=x.dtype)
    strides = contiguous_strides(x.shape)
    wrapped = _int_binary("add", index, _int_binary("mul", _compare("lt", index, 0), x.shape[d], int64), int64)
    positions = _int_binary("mul", wrapped, strides[d], int64)
    for k in range(x.ndim):
        if k != d and index.shape[k] > 1:
            coord = arange(index.shape[k]).reshape((1,) * k + (-1,) + (1,) * (x.ndim - k - 1))
            positions = _int_binary("add", positions, _int_binary("mul", coord, strides[k], int64), int64)
    positions = positions if positions.shape == index.shape else expand(positions, index.shape)
    dev, n = gpu(), index.numel()
    if add:
        if not x.dtype.is_floating_point:
            raise ValueError(f"scatter_add: only float tensors are supported, got {x.dtype}")
        added = dev.scatter_add_axis(src._buf, positions._buf, 1, x.numel(), n, 1)
        out = Tensor(dev.add(x._buf, added), x.shape, x.dtype)
        return _record("scatter_add", out, (x, src), rule("scatter_add", dev, positions._buf, n))
    buf = dev.index_put(dev.copy(x._buf), positions._buf, src._buf)
    return _record("scatter", Tensor(buf, x.shape, x.dtype), (x, src), rule("scatter", dev, positions._buf, n))
