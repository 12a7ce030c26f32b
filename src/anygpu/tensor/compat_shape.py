"""torch-compat additions (see compat_common.py): shape, indexing and small linear algebra.

Everything is composed from existing Tensor ops, so dtypes and autograd come with them.
Views stay views where torch's are (tensor_split and its h/v/dsplit forms, ravel of a
contiguous tensor, adjoint/mH); the scatter-like ops (put, index_put, scatter_reduce,
index_reduce, the *_scatter family) return new tensors, their in-place forms write
through `_inplace`. The reductions at repeated positions (scatter_reduce, index_reduce,
put/index_put with accumulate=True on integers) read the index to the host and lay each
target position's members out in one row of a [targets, most members] tensor filled with
the reduction's identity, then reduce the rows (memory: targets x the largest count).
"""

from __future__ import annotations

import builtins
import itertools
import math
import warnings

import numpy as np

from .. import dtypes
from ..ops.nd import broadcast_shapes as _broadcast_shapes, contiguous_strides, numel

from .core import Tensor, _dim, _is_int, bool_
from .compat_common import method_function
from .creation import full, linked_empty, ones, tensor, zeros
from .elementwise import _cast, _to_tensor
from .indexing import _expand_index, _flat_positions, _index_tensor, getitem, index_select, nonzero, setitem
from .inplace import _inplace
from .linear import _scaled_sum, matmul
from .outputs import factory, with_out, write_out

METHODS: dict = {}
FUNCTIONS: dict = {}


def _method(fn):
    METHODS[fn.__name__] = fn
    return fn


def _function(fn):
    FUNCTIONS[fn.__name__] = fn
    return fn


# ----------------------------------------------------------------------------- splitting
def _piece(x: Tensor, d: int, start: int, stop: int) -> Tensor:
    return getitem(x, (slice(None),) * d + (slice(start, stop),))


@_method
def tensor_split(self, indices_or_sections, dim: int = 0):
    """Views of x cut along dim: into n pieces (the first size % n one longer) or at the
    given indices (clamped to the dim's size, as torch)."""
    d = _dim("tensor_split", dim, self.ndim)
    size = self.shape[d]
    if isinstance(indices_or_sections, Tensor):
        if not _is_int(indices_or_sections.dtype) or indices_or_sections.ndim > 1:
            raise ValueError(f"tensor_split: a tensor indices_or_sections must be a 0-d or 1-D integer tensor, "
                             f"got dtype {indices_or_sections.dtype} and shape {indices_or_sections.shape}")
        values = indices_or_sections.tolist()
        indices_or_sections = values if isinstance(values, list) else int(values)
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections < 1:
            raise ValueError(f"tensor_split: number of sections must be larger than 0, got {sections}")
        small, extra = divmod(size, sections)
        bounds = [k * small + builtins.min(k, extra) for k in range(sections + 1)]
    else:
        cuts = [int(i) for i in indices_or_sections]
        bounds = [0] + [builtins.min(builtins.max(c if c >= 0 else c + size, 0), size) for c in cuts] + [size]
    return tuple(_piece(self, d, bounds[k], builtins.max(bounds[k], bounds[k + 1])) for k in range(len(bounds) - 1))


def _directional_split(op: str, dim: int, min_ndim: int):
    def split(self, indices_or_sections):
        if self.ndim < min_ndim:
            raise ValueError(f"torch.{op} requires a tensor with at least {min_ndim} dimension(s), "
                             f"but got a tensor with {self.ndim} dimensions!")
        d = dim if self.ndim > 1 or op != "hsplit" else 0
        if isinstance(indices_or_sections, (int, np.integer)):
            sections = int(indices_or_sections)
            if sections < 1 or self.shape[d] % sections:
                raise ValueError(f"torch.{op} attempted to split along dimension {d}, but the size of the dimension "
                                 f"{self.shape[d]} is not divisible by the split_size {sections}!")
        return tensor_split(self, indices_or_sections, d)
    split.__name__ = split.__qualname__ = op
    split.__doc__ = f"torch.{op}: tensor_split along dim {dim} (views); sections must divide the dim evenly."
    return split


for _op, _d, _least in (("hsplit", 1, 1), ("vsplit", 0, 2), ("dsplit", 2, 3)):
    METHODS[_op] = _directional_split(_op, _d, _least)


@_method
def split_with_sizes(self, split_sizes, dim: int = 0):
    """split with a list of sizes (views, like split's)."""
    if isinstance(split_sizes, (int, np.integer)):
        raise TypeError(f"split_with_sizes: split_sizes must be a list of ints, got {split_sizes!r}")
    return self.split(list(split_sizes), dim)


@_method
def unsafe_split(self, split_size, dim: int = 0):
    """split whose views torch does not guard against in-place use."""
    d = _dim("unsafe_split", dim, self.ndim)
    return unsafe_split_with_sizes(self, [p.shape[d] for p in self.split(split_size, d)], d)


@_method
def unsafe_split_with_sizes(self, split_sizes, dim: int = 0):
    d = _dim("unsafe_split_with_sizes", dim, self.ndim)
    sizes = [int(s) for s in split_sizes]
    if builtins.sum(sizes) != self.shape[d]:
        raise ValueError(f"unsafe_split_with_sizes: sizes {sizes} do not add up to size {self.shape[d]} of dim {d}")
    bounds = np.cumsum([0] + sizes).tolist()
    return tuple(_piece(self, d, bounds[k], bounds[k + 1]) for k in range(len(sizes)))


@_method
def unsafe_chunk(self, chunks: int, dim: int = 0):
    d = _dim("unsafe_chunk", dim, self.ndim)
    pieces = self.chunk(chunks, d)
    return unsafe_split_with_sizes(self, [p.shape[d] for p in pieces], d)


# ----------------------------------------------------------------------------- views and small reshapes
@_method
def ravel(self):
    """The elements as 1-D: a view of a contiguous tensor, else a copy (torch's ravel)."""
    return self.reshape(-1)


@_method
def fliplr(self):
    if self.ndim < 2:
        raise ValueError(f"fliplr: input must be >= 2-d, got shape {self.shape}")
    return self.flip(1)


@_method
def flipud(self):
    if self.ndim < 1:
        raise ValueError("flipud: input must be >= 1-d, got a 0-d tensor")
    return self.flip(0)


@_method
def adjoint(self):
    """The conjugate transpose of the last two dims (the transpose: anygpu has no complex dtypes); a view."""
    if self.ndim < 2:
        raise ValueError(f"adjoint: tensor.adjoint() is only supported on matrices or batches of matrices, "
                         f"got a {self.ndim}-D tensor")
    return self.transpose(-2, -1)


METHODS["mH"] = property(adjoint, doc="Tensor.mH: adjoint() (a view).")


def _conj_transpose(self):
    if self.ndim not in (0, 2):
        raise ValueError(f"tensor.H is only supported on matrices (2-D tensors), got a {self.ndim}-D tensor")
    return self.T


METHODS["H"] = property(_conj_transpose, doc="Tensor.H: the (conjugate) transpose of a matrix, a view.")
METHODS["nbytes"] = property(lambda self: self.numel() * self.element_size(),
                             doc="Bytes the elements take (numel * element_size).")
METHODS["itemsize"] = property(lambda self: self.element_size(), doc="Bytes per element.")


@_method
def is_same_size(self, other) -> bool:
    return tuple(self.shape) == tuple(other.shape)


@_method
def is_signed(self) -> bool:
    """Whether the dtype holds negative values (every anygpu dtype but bool)."""
    return self.dtype is not bool_


@_method
def narrow_copy(self, dim: int, start: int, length: int):
    """narrow's elements in a new tensor (not a view)."""
    d = _dim("narrow_copy", dim, self.ndim)
    size = self.shape[d]
    begin = start + size if start < 0 else start
    if not 0 <= begin <= size or length < 0 or begin + length > size:
        raise IndexError(f"narrow_copy: start {start} and length {length} are out of range for dimension {d} "
                         f"of size {size}")
    return self.narrow(d, begin, length).clone()


@_method
def diagflat(self, offset: int = 0):
    """The flattened input on a diagonal of a square matrix."""
    return self.reshape(-1).diag(offset)


@_method
def diag_embed(self, offset: int = 0, dim1: int = -2, dim2: int = -1):
    from ..functions import diag_embed as embed  # one implementation, torch.diag_embed's
    return embed(self, offset, dim1, dim2)


@_method
def argwhere(self):
    """The indices of nonzero elements, [count, ndim] (torch.argwhere, nonzero's twin)."""
    return nonzero(self)


# ----------------------------------------------------------------------------- positions read on the host
def _positions(op: str, index: Tensor, size: int, dim: int) -> np.ndarray:
    """index's values as int64 on the host, in [0, size) (negatives wrap; others: IndexError)."""
    host = np.asarray(index.numpy(), dtype=np.int64)
    if host.size and (host.min() < -size or host.max() >= size):
        bad = host.min() if host.min() < -size else host.max()
        raise IndexError(f"{op}: index {bad} is out of bounds for dimension {dim} with size {size}")
    return np.where(host < 0, host + size, host)


_REDUCES = ("sum", "prod", "mean", "amax", "amin")


def _identity(reduce: str, dtype) -> float | int:
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.is_floating_point:
        return -math.inf if reduce == "amax" else math.inf
    low, high = (0, 1) if dtype is bool_ else (-(2 ** 31), 2 ** 31 - 1)  # (int64 is held in 32 bits)
    return low if reduce == "amax" else high


def _reduce_at(flat: Tensor, positions: np.ndarray, values: Tensor, reduce: str, include_self: bool) -> Tensor:
    """flat (1-D) with each position named in `positions` (host int64, one per element of the
    1-D `values`) replaced by `reduce` over the values sent there (and flat's own value with
    include_self); positions nobody names keep flat's value."""
    if values.dtype is not flat.dtype:
        values = _cast(values, flat.dtype)
    if positions.size == 0:
        return flat.clone()
    targets, members, counts = np.unique(positions, return_inverse=True, return_counts=True)
    members = members.reshape(-1)
    own = index_select(flat, 0, tensor(targets)) if include_self else None
    if reduce in ("sum", "mean") and flat.dtype.is_floating_point:
        reduced = zeros(targets.size, dtype=flat.dtype).index_add(0, tensor(members), values)
        if own is not None:
            reduced = reduced + own
    else:
        if own is not None:
            values = values if values.numel() else values.reshape(0)
            from .shape import cat
            values = cat([own, values])
            members = np.concatenate([np.arange(targets.size), members])
        order = np.argsort(members, kind="stable")
        starts = np.searchsorted(members[order], np.arange(targets.size))
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size) - starts[members[order]]
        width = int(np.bincount(members).max())
        dense = full((targets.size * width,), _identity(reduce, flat.dtype), dtype=flat.dtype)
        dense = dense.scatter(0, tensor(members * width + rank), values).reshape(targets.size, width)
        if reduce in ("sum", "mean"):
            reduced = dense.sum(1)
        elif reduce == "prod":
            reduced = dense.prod(1)
        else:
            reduced = dense.amax(1) if reduce == "amax" else dense.amin(1)
        reduced = reduced if reduced.dtype is flat.dtype else _cast(reduced, flat.dtype)
    if reduce == "mean":
        count = tensor((counts + (1 if include_self else 0)).astype(np.int64))
        reduced = reduced / _cast(count, flat.dtype) if flat.dtype.is_floating_point else reduced // count
    return flat.scatter(0, tensor(targets), reduced)


def _check_reduce(op: str, reduce: str, allowed) -> None:
    if reduce not in allowed:
        raise ValueError(f"{op}: reduce argument must be one of {', '.join(allowed)}, got {reduce!r}")


@_method
def scatter_reduce(self, dim: int, index, src, reduce: str, *, include_self: bool = True):
    """self with src's values sent along dim to index's positions and reduced there with
    `reduce` (sum, prod, mean, amax, amin), self's own value included unless include_self=False.
    index: the dims of self, no larger than src (and than self outside dim)."""
    _check_reduce("scatter_reduce", reduce, _REDUCES)
    index, src = _index_tensor("scatter_reduce", index), _to_tensor(src)
    d = _dim("scatter_reduce", dim, self.ndim)
    if index.ndim != self.ndim or (index.numel() and src.ndim != self.ndim):
        raise ValueError(f"scatter_reduce: index (shape {index.shape}) and src (shape {src.shape}) must have the "
                         f"dims of self (shape {self.shape})")
    if any(i > s for i, s in zip(index.shape, src.shape)) or \
            any(i > s for k, (i, s) in enumerate(zip(index.shape, self.shape)) if k != d):
        raise ValueError(f"scatter_reduce: index of shape {index.shape} is larger than src {src.shape} or than "
                         f"self {self.shape} outside dim {d}")
    host = np.asarray(index.numpy(), dtype=np.int64)
    size = self.shape[d] if self.ndim else 1
    if host.size and (host.min() < 0 or host.max() >= size):
        bad = host.min() if host.min() < 0 else host.max()
        raise IndexError(f"scatter_reduce: index {bad} is out of bounds for dimension {d} with size {size}")
    if self.ndim == 0:
        positions = host.reshape(-1)
    else:
        coords = list(np.indices(index.shape, dtype=np.int64))
        coords[d] = host
        positions = np.ravel_multi_index(tuple(c.reshape(-1) for c in coords), self.shape) if host.size else host
    values = src if src.shape == index.shape else getitem(src, tuple(slice(0, n) for n in index.shape))
    flat = _reduce_at(self.reshape(-1), positions.reshape(-1), values.reshape(-1), reduce, include_self)
    return flat.reshape(self.shape)


@_method
def scatter_reduce_(self, dim: int, index, src, reduce: str, *, include_self: bool = True):
    return _inplace(self, scatter_reduce(self, dim, index, src, reduce, include_self=include_self),
                    "scatter_reduce_")


@_method
def index_reduce(self, dim: int, index, source, reduce: str, *, include_self: bool = True):
    """self with source's slices (along dim) reduced into the slices `index` names:
    prod, mean, amax or amin, self's own values included unless include_self=False."""
    _check_reduce("index_reduce", reduce, ("prod", "mean", "amax", "amin"))
    source = _to_tensor(source)
    if self.ndim == 0:
        return index_reduce(self.reshape(1), 0, index, source.reshape(-1), reduce,
                            include_self=include_self).reshape(())
    d = _dim("index_reduce", dim, self.ndim)
    index = _index_tensor("index_reduce", index)
    if index.ndim > 1:
        raise ValueError(f"index_reduce: index must be 1-D or 0-d, got shape {index.shape}")
    want = self.shape[:d] + (index.numel(),) + self.shape[d + 1:]
    if tuple(source.shape) != want:
        raise ValueError(f"index_reduce: source of shape {want} expected ({index.numel()} indices along dim {d} "
                         f"of a tensor of shape {self.shape}), got {source.shape}")
    host = _positions("index_reduce", index, self.shape[d], d).reshape(-1)
    coords = list(np.indices(want, dtype=np.int64))
    coords[d] = host.reshape((1,) * d + (-1,) + (1,) * (self.ndim - d - 1)) + 0 * coords[d]
    positions = np.ravel_multi_index(tuple(c.reshape(-1) for c in coords), self.shape) if host.size else host
    return _reduce_at(self.reshape(-1), positions, source.reshape(-1), reduce, include_self).reshape(self.shape)


@_method
def index_reduce_(self, dim: int, index, source, reduce: str, *, include_self: bool = True):
    return _inplace(self, index_reduce(self, dim, index, source, reduce, include_self=include_self),
                    "index_reduce_")


@_method
def take(self, index):
    """The elements at flat positions `index` (negatives count from the end), in index's shape."""
    index = _index_tensor("take", index)
    n = self.numel()
    host = _positions("take", index, n, 0)
    if n == 0 and host.size:
        raise IndexError("take: cannot take from an empty tensor")
    picked = index_select(self.reshape(-1), 0, tensor(host.reshape(-1))) if host.size else \
        zeros(0, dtype=self.dtype)
    return picked.reshape(index.shape)


@_method
def put(self, index, source, accumulate: bool = False):
    """self with source's elements written (or with accumulate, added) at flat positions
    `index` (negatives wrap); index and source have the same number of elements."""
    index, source = _index_tensor("put", index), _to_tensor(source)
    if index.numel() != source.numel():
        raise ValueError(f"put: index has {index.numel()} elements, source {source.numel()}; they must match")
    host = _positions("put", index, self.numel(), 0).reshape(-1)
    flat, values = self.reshape(-1), source.reshape(-1)
    if accumulate:
        out = _reduce_at(flat, host, values, "sum", include_self=True)
    elif host.size:
        out = flat.scatter(0, tensor(host), values if values.dtype is self.dtype else _cast(values, self.dtype))
    else:
        out = flat.clone()
    return out.reshape(self.shape)


@_method
def put_(self, index, source, accumulate: bool = False):
    return _inplace(self, put(self, index, source, accumulate), "put_")


@_method
def index_put(self, indices, values, accumulate: bool = False):
    """self with self[indices] = values (indices: a tuple of index tensors, None for a whole
    dim), or with accumulate, values added there (repeated positions add up)."""
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"index_put: indices must be a tuple of tensors, got {type(indices).__name__}")
    items = tuple(slice(None) if i is None else _to_tensor(i) for i in indices)
    values = _to_tensor(values)
    if not accumulate:
        out = self.clone()
        setitem(out, items, values)
        return out
    expanded = _expand_index(self, items)
    if not any(isinstance(item, Tensor) for item in expanded):
        out = self.clone()
        setitem(out, items, getitem(self, items) + values)
        return out
    positions = _flat_positions(self, expanded)
    values = values if values.shape == positions.shape else values.expand(positions.shape)
    host = np.asarray(positions.numpy(), dtype=np.int64).reshape(-1)
    return _reduce_at(self.reshape(-1), host, values.reshape(-1), "sum", include_self=True).reshape(self.shape)


@_method
def index_put_(self, indices, values, accumulate: bool = False):
    return _inplace(self, index_put(self, indices, values, accumulate), "index_put_")


# ----------------------------------------------------------------------------- *_scatter: a view's elements replaced
def _scatter_into(op: str, self, src, items) -> Tensor:
    src = _to_tensor(src)
    want = getitem(self, items).shape
    if tuple(src.shape) != tuple(want):
        raise ValueError(f"{op}: expected src to have a size equal to the slice of self, {tuple(want)}, "
                         f"got {tuple(src.shape)}")
    out = self.clone()
    setitem(out, items, src)
    return out


@_method
def select_scatter(self, src, dim: int, index: int):
    """self with self.select(dim, index) replaced by src."""
    d = _dim("select_scatter", dim, self.ndim)
    size = self.shape[d]
    if not -size <= index < size:
        raise IndexError(f"select_scatter: index {index} is out of range for dimension {d} of size {size}")
    return _scatter_into("select_scatter", self, src, (slice(None),) * d + (int(index),))


@_method
def slice_scatter(self, src, dim: int = 0, start=None, end=None, step: int = 1):
    """self with self[..., start:end:step, ...] (along dim) replaced by src."""
    d = _dim("slice_scatter", dim, self.ndim)
    if step is None or step < 1:
        raise ValueError(f"slice_scatter: step must be positive, got {step}")
    return _scatter_into("slice_scatter", self, src, (slice(None),) * d + (slice(start, end, step),))


@_method
def diagonal_scatter(self, src, offset: int = 0, dim1: int = 0, dim2: int = 1):
    """self with self.diagonal(offset, dim1, dim2) replaced by src."""
    src = _to_tensor(src)
    want = self.diagonal(offset, dim1, dim2).shape
    if tuple(src.shape) != tuple(want):
        raise ValueError(f"diagonal_scatter: expected src to have a size equal to the diagonal of self, "
                         f"{tuple(want)}, got {tuple(src.shape)}")
    out = self.clone()
    out.diagonal(offset, dim1, dim2).copy_(src)
    return out


@_method
def fill_diagonal_(self, fill_value, wrap: bool = False):
    """fill_value on the main diagonal (all dims equal beyond 2-D); with wrap, a tall
    matrix's diagonal starts again every cols + 1 rows, as torch."""
    if self.ndim < 2:
        raise ValueError(f"fill_diagonal_: dimensions must be larger than 1, got shape {self.shape}")
    if self.ndim > 2 and len(set(self.shape)) != 1:
        raise ValueError(f"fill_diagonal_: all dimensions of input must be of equal length, got {self.shape}")
    step = builtins.sum(contiguous_strides(self.shape))
    length = builtins.min(self.shape)
    if self.ndim == 2 and wrap and self.shape[0] > self.shape[1] + 1:
        positions = np.arange(0, self.numel(), step)
    else:
        positions = np.arange(length) * step
    mask = np.zeros(self.numel(), dtype=np.bool_)
    mask[positions] = True
    return _inplace(self, self.masked_fill(tensor(mask.reshape(self.shape)), fill_value), "fill_diagonal_")


# ----------------------------------------------------------------------------- products
def _vector(op: str, t, name: str) -> Tensor:
    t = _to_tensor(t)
    if t.ndim != 1:
        raise ValueError(f"{op}: {name} must be 1-D, got shape {t.shape}")
    return t


def _matrix(op: str, t, name: str) -> Tensor:
    t = _to_tensor(t)
    if t.ndim != 2:
        raise ValueError(f"{op}: {name} must be 2-D, got shape {t.shape}")
    return t


def _broadcast_input(op: str, input, result: Tensor, beta) -> Tensor:
    input = _to_tensor(input)
    if _broadcast_shapes(op, input.shape, result.shape) != tuple(result.shape):
        raise ValueError(f"{op}: input of shape {input.shape} does not broadcast to the product's {result.shape}")
    out = _scaled_sum(input, result, beta, 1)
    return out if out.shape == result.shape else out.expand(result.shape)


@_method
def mv(self, vec):
    """Matrix [n, m] times vector [m] -> [n]."""
    mat, vec = _matrix("mv", self, "input"), _vector("mv", vec, "vec")
    if mat.shape[1] != vec.shape[0]:
        raise ValueError(f"mv: size mismatch, got input {mat.shape} and vec {vec.shape}")
    return matmul(mat, vec)


@_method
def vdot(self, other):
    """The dot product of two 1-D tensors (no conjugation: anygpu has no complex dtypes)."""
    a, b = _vector("vdot", self, "input"), _vector("vdot", other, "other")
    if a.shape != b.shape:
        raise ValueError(f"vdot: inconsistent tensor size, expected {a.shape} and {b.shape} to match")
    return self.dot(b)


@_method
def ger(self, vec2):
    """outer's old name: [n] x [m] -> [n, m]."""
    return self.outer(vec2)


@_method
def addmv(self, mat, vec, *, beta=1, alpha=1):
    """beta * self + alpha * (mat @ vec); beta=0 ignores self's values (NaN included)."""
    product = mv(_to_tensor(mat), vec)
    return _broadcast_input("addmv", self, product if alpha == 1 else product * alpha, beta)


@_method
def addr(self, vec1, vec2, *, beta=1, alpha=1):
    """beta * self + alpha * outer(vec1, vec2)."""
    product = _vector("addr", vec1, "vec1").outer(_vector("addr", vec2, "vec2"))
    return _broadcast_input("addr", self, product if alpha == 1 else product * alpha, beta)


@_method
def addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    """beta * self + alpha * sum_b batch1[b] @ batch2[b]."""
    batch1, batch2 = _to_tensor(batch1), _to_tensor(batch2)
    if batch1.ndim != 3 or batch2.ndim != 3 or batch1.shape[0] != batch2.shape[0] or \
            batch1.shape[2] != batch2.shape[1]:
        raise ValueError(f"addbmm: expected batches [b, n, m] and [b, m, p], got {batch1.shape} and {batch2.shape}")
    product = matmul(batch1, batch2).sum(0)
    return _broadcast_input("addbmm", self, product if alpha == 1 else product * alpha, beta)


for _name, _fn in (("addmv_", addmv), ("addr_", addr), ("addbmm_", addbmm)):
    def _inplace_form(self, *args, _fn=_fn, _name=_name, beta=1, alpha=1):
        return _inplace(self, _fn(self, *args, beta=beta, alpha=alpha), _name)
    _inplace_form.__name__ = _inplace_form.__qualname__ = _name
    METHODS[_name] = _inplace_form


@_method
def matrix_power(self, n: int):
    """The square matrix (or batch of them) to the integer power n (n < 0: of the inverse)."""
    if self.ndim < 2 or self.shape[-1] != self.shape[-2]:
        raise ValueError(f"matrix_power: expected a square matrix or a batch of them, got shape {self.shape}")
    if not isinstance(n, (int, np.integer)):
        raise TypeError(f"matrix_power: n must be an int, got {type(n).__name__}")
    size = self.shape[-1]
    if n == 0:
        eye = tensor(np.eye(size), dtype=self.dtype)
        return linked_empty(eye.expand(self.shape).clone(), self)  # (a zero gradient, as torch's)
    base = self if n > 0 else self.inverse()
    result, n = None, builtins.abs(int(n))
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


@_method
def kron(self, other):
    """The Kronecker product: every element of self times all of other, in blocks."""
    a, b = _to_tensor(self), _to_tensor(other)
    ndim = builtins.max(a.ndim, b.ndim)
    a_shape = (1,) * (ndim - a.ndim) + tuple(a.shape)
    b_shape = (1,) * (ndim - b.ndim) + tuple(b.shape)
    a_wide = a.reshape(tuple(v for s in a_shape for v in (s, 1)))
    b_wide = b.reshape(tuple(v for s in b_shape for v in (1, s)))
    return (a_wide * b_wide).reshape(tuple(p * q for p, q in zip(a_shape, b_shape)))


@_function
def tensordot(a, b, dims=2, out=None):
    """Sum of products over dims of a and b: `dims` an int (a's last dims with b's first) or
    two lists of dims, one per tensor."""
    a, b = _to_tensor(a), _to_tensor(b)
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, (int, np.integer)):
        if dims < 0 or dims > builtins.min(a.ndim, b.ndim):
            raise ValueError(f"tensordot: dims must be in [0, {builtins.min(a.ndim, b.ndim)}], got {dims}")
        dims_a, dims_b = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        if len(dims) != 2:
            raise ValueError(f"tensordot: dims must be an int or two lists of dims, got {dims!r}")
        dims_a = [dims[0]] if isinstance(dims[0], int) else list(dims[0])
        dims_b = [dims[1]] if isinstance(dims[1], int) else list(dims[1])
        if len(dims_a) != len(dims_b):
            raise ValueError(f"tensordot: both dimension lists should have the same length, got {dims_a} and {dims_b}")
    dims_a = [_dim("tensordot", d, a.ndim) for d in dims_a]
    dims_b = [_dim("tensordot", d, b.ndim) for d in dims_b]
    for da, db in zip(dims_a, dims_b):
        if a.shape[da] != b.shape[db]:
            raise ValueError(f"tensordot: contracted dimensions need to match, but first has size {a.shape[da]} "
                             f"in dim {da} and second has size {b.shape[db]} in dim {db}")
    free_a = [d for d in range(a.ndim) if d not in dims_a]
    free_b = [d for d in range(b.ndim) if d not in dims_b]
    k = numel(a.shape[d] for d in dims_a)
    left = a.permute(free_a + dims_a).reshape(numel(a.shape[d] for d in free_a), k)
    right = b.permute(dims_b + free_b).reshape(k, numel(b.shape[d] for d in free_b))
    result = matmul(left, right).reshape(tuple(a.shape[d] for d in free_a) + tuple(b.shape[d] for d in free_b))
    return write_out("tensordot", result, out)


@_function
def chain_matmul(*matrices, out=None):
    """The product of 2-D matrices, left to right (torch's deprecated form of linalg.multi_dot)."""
    if len(matrices) == 1 and isinstance(matrices[0], (list, tuple)):
        matrices = tuple(matrices[0])
    if not matrices:
        raise ValueError("chain_matmul(): Expected one or more matrices")
    mats = [_matrix("chain_matmul", m, "every matrix") for m in matrices]
    result = mats[0].clone() if len(mats) == 1 else mats[0]
    for m in mats[1:]:
        result = matmul(result, m)
    return write_out("chain_matmul", result, out)


# ----------------------------------------------------------------------------- joining
def _at_least(op: str, rank: int, tensors):
    single = len(tensors) == 1 and not isinstance(tensors[0], (list, tuple))
    items = tensors if not (len(tensors) == 1 and isinstance(tensors[0], (list, tuple))) else tensors[0]
    shaped = []
    for t in items:
        t = _to_tensor(t)
        if t.ndim < rank:
            if rank == 3 and t.ndim == 2:
                t = t.unsqueeze(-1)
            elif rank == 3 and t.ndim == 1:
                t = t.reshape(1, -1, 1)
            else:
                t = t.reshape((1,) * (rank - builtins.max(t.ndim, 1)) + tuple(t.shape or (1,)))
        shaped.append(t)
    return shaped[0] if single else tuple(shaped)


@_function
def atleast_1d(*tensors):
    """Each tensor with at least 1 dim (0-d -> [1]); a tuple for several (views)."""
    return _at_least("atleast_1d", 1, tensors)


@_function
def atleast_2d(*tensors):
    """At least 2 dims: 0-d -> [1, 1], [n] -> [1, n] (views)."""
    return _at_least("atleast_2d", 2, tensors)


@_function
def atleast_3d(*tensors):
    """At least 3 dims: 0-d -> [1, 1, 1], [n] -> [1, n, 1], [m, n] -> [m, n, 1] (views)."""
    return _at_least("atleast_3d", 3, tensors)


def _joined(op: str, tensors, shape_one, dim: int) -> Tensor:
    from .shape import cat
    if isinstance(tensors, Tensor) or not len(tensors):
        raise TypeError(f"{op}: expected a non-empty sequence of tensors, got {type(tensors).__name__}")
    return cat([shape_one(_to_tensor(t)) for t in tensors], dim)


@_function
def column_stack(tensors, *, out=None):
    """Tensors side by side as columns: 0-d and 1-d ones become [n, 1] columns."""
    result = _joined("column_stack", tensors, lambda t: t.reshape(-1, 1) if t.ndim <= 1 else t, 1)
    return write_out("column_stack", result, out)


@_function
def dstack(tensors, *, out=None):
    """Tensors joined along a third dim (atleast_3d first)."""
    result = _joined("dstack", tensors, lambda t: _at_least("dstack", 3, (t,)), 2)
    return write_out("dstack", result, out)


@_function
def row_stack(tensors, *, out=None):
    """vstack's other name: rows on top of each other (atleast_2d first)."""
    result = _joined("row_stack", tensors, lambda t: _at_least("row_stack", 2, (t,)), 0)
    return write_out("row_stack", result, out)


@_function
def block_diag(*tensors):
    """The tensors (0-d, 1-d as one row, or 2-D) as blocks on a diagonal, zeros elsewhere."""
    from .shape import cat
    blocks = []
    for k, t in enumerate(tensors):
        t = _to_tensor(t)
        if t.ndim > 2:
            raise ValueError(f"block_diag: Input tensors must have 2 or fewer dimensions. Input {k} has {t.ndim} "
                             f"dimensions")
        blocks.append(t.reshape(1, -1) if t.ndim < 2 else t)
    if not blocks:
        return zeros(1, 0)
    dtype = blocks[0].dtype
    for t in blocks[1:]:
        dtype = dtypes.promote(dtype, t.dtype)
    width = builtins.sum(t.shape[1] for t in blocks)
    rows, left = [], 0
    for t in blocks:
        r, c = t.shape
        parts = [p for p in (zeros(r, left, dtype=dtype), t if t.dtype is dtype else _cast(t, dtype),
                             zeros(r, width - left - c, dtype=dtype)) if p.numel()]
        if r and parts:
            rows.append(parts[0] if len(parts) == 1 else cat(parts, 1))
        left += c
    height = builtins.sum(t.shape[0] for t in blocks)
    empty = [t for t in blocks if not t.numel()]  # (their gradients: zeros, as torch's)
    if not rows or not width:
        return linked_empty(zeros(height, width, dtype=dtype), *blocks)
    return linked_empty(rows[0].clone() if len(rows) == 1 else cat(rows, 0), *empty)


# ----------------------------------------------------------------------------- index factories
def _triangle_indices(op: str, lower: bool):
    @factory(variadic=False, size_keyword=False)
    def make(row: int, col: int, offset: int = 0, *, dtype=None, device=None) -> Tensor:
        if row < 0 or col < 0:
            raise ValueError(f"{op}: row and col must be non-negative, got {row} and {col}")
        found = (np.tril_indices if lower else np.triu_indices)(int(row), int(offset), int(col))
        dtype = dtypes.to_dtype(dtype, op) if dtype is not None else dtypes.int64
        if dtype.is_floating_point or dtype is bool_:
            raise ValueError(f"{op}: dtype must be an integer dtype, got {dtype}")
        return tensor(np.stack(found).astype(np.int64).reshape(2, -1), dtype=dtype)
    make.__name__ = make.__qualname__ = op
    make.__doc__ = f"torch.{op}(row, col, offset=0): the [2, N] coordinates of a {row_col(lower)} triangle."
    return make


def row_col(lower: bool) -> str:
    return "row x col matrix's lower" if lower else "row x col matrix's upper"


FUNCTIONS["tril_indices"] = _triangle_indices("tril_indices", lower=True)
FUNCTIONS["triu_indices"] = _triangle_indices("triu_indices", lower=False)


@_function
def unravel_index(indices, shape):
    """The coordinates in `shape` of flat positions (a tuple of int64 tensors, one per dim)."""
    indices = _to_tensor(indices)
    if not _is_int(indices.dtype):
        raise TypeError(f"unravel_index: expected 'indices' to be an integer tensor, got {indices.dtype}")
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"unravel_index: 'shape' cannot have negative values, got {shape}")
    total = numel(shape)
    host = indices.numpy()
    if host.size and (host.min() < -total or host.max() >= total):
        raise ValueError(f"unravel_index: 'indices' must be in range [{-total}, {total - 1}] for shape {shape}")
    flat = indices.long()
    flat = flat + (flat < 0).long() * total
    coords = []
    for size in reversed(shape):
        coords.append(flat % size if size else flat * 0)
        flat = flat // size if size else flat
    return tuple(reversed(coords))


@_function
def vander(x, N=None, increasing: bool = False):
    """Columns of powers of the 1-D x: x^(N-1) ... x^0 (reversed with increasing)."""
    x = _to_tensor(x)
    if x.ndim != 1:
        raise ValueError(f"vander: x must be a one-dimensional tensor, got shape {x.shape}")
    count = x.shape[0] if N is None else int(N)
    if count < 0:
        raise ValueError(f"vander: N must be non-negative, got {count}")
    x = x if x.dtype.is_floating_point or x.dtype is not bool_ else x.long()
    if count == 0 or x.shape[0] == 0:
        return zeros(x.shape[0], count, dtype=x.dtype)
    powers = [ones(x.shape[0], dtype=x.dtype)]
    for _ in range(count - 1):
        powers.append(powers[-1] * x)
    from .shape import stack
    return stack(powers if increasing else powers[::-1], 1)


@_function
def combinations(input, r: int = 2, with_replacement: bool = False):
    """The r-element combinations of a 1-D tensor's elements, one per row (itertools' order)."""
    input = _to_tensor(input)
    if input.ndim != 1:
        raise ValueError(f"combinations: Expect a 1D vector, but got shape {input.shape}")
    if r < 0:
        raise ValueError(f"combinations: Expect a non-negative number, but got {r}")
    if r == 0:
        return zeros(0, dtype=input.dtype)
    pick = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    chosen = np.array(list(pick(range(input.shape[0]), r)), dtype=np.int64).reshape(-1, r)
    if chosen.shape[0] == 0:
        return linked_empty(zeros(0, r, dtype=input.dtype), input)
    from .shape import stack
    return stack([index_select(input, 0, tensor(chosen[:, k])) for k in range(r)], 1)


def _deprecated_range():
    """torch.range, made in a scope of its own (the name would hide Python's range here)."""
    @factory(variadic=False, size_keyword=False)
    def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad: bool = False):  # noqa: A001
        """torch.range (deprecated): start to end *inclusive* every step, float by default."""
        warnings.warn("torch.range is deprecated and will be removed in a future release because its behavior is "
                      "inconsistent with Python's range builtin. Instead, use torch.arange, which produces values in "
                      "[start, end).", UserWarning, stacklevel=3)
        if end is None:
            raise TypeError("range() missing required argument 'end'")
        start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
        if step == 0:
            raise ValueError("range: step must be nonzero")
        if (end - start) * step < 0:
            raise ValueError(f"range: upper bound and larger bound inconsistent with step sign "
                             f"(start {start}, end {end}, step {step})")
        count = int(math.floor((end - start) / step)) + 1
        values = start + np.arange(count, dtype=np.float64) * step
        return tensor(values, dtype=dtype or dtypes.default_float(), requires_grad=requires_grad)
    return range


# torch.range (functions.py, where it lands, says builtins.range for Python's)
inclusive_range = FUNCTIONS["range"] = _deprecated_range()


@_function
def broadcast_shapes(*shapes):
    """The shape tensors of these shapes broadcast to (torch.Size); ValueError if none."""
    from ..functions import Size
    sizes = [(int(s),) if isinstance(s, (int, np.integer)) else tuple(int(v) for v in s) for s in shapes]
    return Size(_broadcast_shapes("broadcast_shapes", *sizes))


# ----------------------------------------------------------------------------- *_copy: a view op's result as a new tensor
def _copy_form(name: str, take_view, out: bool = True):
    def fn(input, *args, **kwargs):
        result = take_view(_to_tensor(input), *args, **kwargs)
        return tuple(r.clone() for r in result) if isinstance(result, tuple) else result.clone()
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"torch.{name}: the view op's result as a new tensor (no storage shared with input)."
    return with_out(name, fn) if out else fn


def _slice_view(input, dim: int = 0, start=None, end=None, step: int = 1):
    return getitem(input, (slice(None),) * _dim("slice_copy", dim, input.ndim) + (slice(start, end, step),))


def _detach_view(t):
    return t.detach()


for _name, _take, _out in (
        ("select_copy", lambda t, dim, index: t.select(dim, index), True),
        ("slice_copy", _slice_view, True),
        ("t_copy", lambda t: t.t(), True),
        ("transpose_copy", lambda t, dim0, dim1: t.transpose(dim0, dim1), True),
        ("permute_copy", lambda t, dims: t.permute(dims), True),
        ("view_copy", lambda t, size: t.view(size), True),
        ("unsqueeze_copy", lambda t, dim: t.unsqueeze(dim), True),
        ("squeeze_copy", lambda t, dim=None: t.squeeze(dim), True),
        ("unfold_copy", lambda t, dimension, size, step: t.unfold(dimension, size, step), True),
        ("expand_copy", lambda t, size, *, implicit=False: t.expand(size), True),
        ("diagonal_copy", lambda t, offset=0, dim1=0, dim2=1: t.diagonal(offset, dim1, dim2), True),
        ("as_strided_copy", lambda t, size, stride, storage_offset=None: t.as_strided(size, stride, storage_offset),
         True),
        ("detach_copy", _detach_view, True),
        ("alias_copy", lambda t: t, True),
        ("unbind_copy", lambda t, dim=0: t.unbind(dim), False),
        ("split_copy", lambda t, split_size, dim=0: t.split(split_size, dim), False),
        ("split_with_sizes_copy", lambda t, split_sizes, dim=0: t.split(list(split_sizes), dim), False)):
    FUNCTIONS[_name] = _copy_form(_name, _take, _out)


# ----------------------------------------------------------------------------- torch.<name> for the methods above
for _name, _out in (("tensor_split", False), ("hsplit", False), ("vsplit", False), ("dsplit", False),
                    ("split_with_sizes", False), ("unsafe_split", False), ("unsafe_split_with_sizes", False),
                    ("unsafe_chunk", False), ("ravel", False), ("fliplr", False), ("flipud", False),
                    ("adjoint", False), ("is_same_size", False), ("is_signed", False), ("narrow_copy", True),
                    ("diagflat", False), ("argwhere", False), ("scatter_reduce", True), ("index_reduce", True),
                    ("take", True), ("put", True), ("index_put", True), ("index_put_", False),
                    ("select_scatter", True), ("slice_scatter", True), ("diagonal_scatter", True),
                    ("mv", True), ("vdot", True), ("ger", True), ("addmv", True), ("addmv_", False),
                    ("addr", True), ("addbmm", True), ("matrix_power", True), ("kron", True),
                    ("swapdims", False)):
    FUNCTIONS[_name] = method_function(_name, out=_out)
