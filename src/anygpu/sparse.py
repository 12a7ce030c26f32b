"""torch.sparse for anygpu: sparse COO tensors, enough for graph networks.

``sparse_coo_tensor(indices, values, size)`` makes a `SparseTensor`: the indices
[sparse_dim, nnz] of the specified elements, kept on the host (they are structure: coalescing,
segment lists and shape checks need them there), and their values [nnz, *dense_dims], a
Tensor on the GPU that carries the autograd graph. Products never densify the sparse operand:

- ``torch.sparse.mm(A, X)``, ``torch.mm``, ``torch.matmul`` and ``@`` of a 2-D sparse A and a
  dense X (either order) run the segment kernels of ops/sparse.py: A's entries listed by row
  (CSR) multiply X's rows; the gradient of X is A^T dY over the same entries listed by column,
  the gradient of the values a sampled product (each entry's dot of dY's row and X's row).
- ``coalesce()`` sums duplicates on the GPU (a segment sum), ``torch.sparse.sum`` over sparse
  dims likewise, ``torch.sparse.softmax`` is a softmax over each row's (or column's) entries.
- sparse + sparse concatenates and sums duplicates; sparse * scalar scales the values;
  sparse + dense is dense, as in torch.

A SparseTensor is a Tensor (isinstance, and Python calls its reflected operators first, so
``dense + sparse`` and ``dense @ sparse`` reach it); dense ops without a sparse form raise
NotImplementedError naming ``to_dense()``, as torch's sparse backend does. Values are float32,
int32 or int64; gradients flow to float32 values. ``s.grad`` of a sparse leaf is a sparse
tensor with s's indices."""

from __future__ import annotations

import weakref

import numpy as np

from . import dtypes, placement
from .dtypes import float32, int32, int64
from .ops import gpu
from .autograd.rules import backward as rule
from .tensor import Tensor, _attach, cat, tensor
from .tensor import matmul as _dense_matmul

__all__ = ["SparseTensor", "sparse_coo_tensor", "mm", "addmm", "sum", "softmax", "log_softmax",
           "sparse_coo", "strided", "layout", "matmul"]

_DTYPES = (float32, int32, int64)
_INDEX_LIMIT = 2**31 - 1  # indices and positions travel to the GPU as i32


class layout:
    """torch.layout: `torch.strided` (dense) or `torch.sparse_coo`."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


strided = layout("strided")
sparse_coo = layout("sparse_coo")


def _dev_buffers(arrays) -> tuple:
    dev = gpu()
    return tuple(dev.upload(np.ascontiguousarray(a, dtype=np.int32), "i32") for a in arrays)


def _grouped(keys: np.ndarray, segments: int | None = None):
    """Segments of entries by key: (ptr [segments+1], perm, seg [in segment order], uniq keys,
    inverse: each entry's segment). With `segments`, keys are already 0..segments-1 (rows)
    and empty segments are kept; otherwise the segments are the distinct keys, in order."""
    perm = np.argsort(keys, kind="stable")
    if segments is None:
        uniq, inverse = np.unique(keys, return_inverse=True)
        inverse = inverse.reshape(-1)
        segments = len(uniq)
    else:
        uniq, inverse = None, keys
    counts = np.bincount(inverse, minlength=segments) if len(keys) else np.zeros(segments, np.int64)
    ptr = np.zeros(segments + 1, np.int64)
    np.cumsum(counts, out=ptr[1:])
    return ptr, perm, inverse[perm], uniq, inverse


class _Pattern:
    """The index structure of a sparse tensor (host side) and the i32 GPU lists built from it
    on first use (shared by every tensor with the same indices: s * 2, softmax(s), ...)."""

    __slots__ = ("indices", "sparse_shape", "keys", "sorted_unique", "_cache")

    def __init__(self, indices: np.ndarray, sparse_shape: tuple):
        self.indices = indices  # int64 [sparse_dim, nnz], read-only
        self.sparse_shape = sparse_shape
        nnz = indices.shape[1]
        if nnz and sparse_shape:
            self.keys = np.ravel_multi_index(tuple(indices), sparse_shape).astype(np.int64)
        else:
            self.keys = np.zeros(nnz, np.int64)
        self.sorted_unique = bool(np.all(self.keys[1:] > self.keys[:-1])) if sparse_shape else nnz <= 1
        self._cache: dict = {}

    @property
    def nnz(self) -> int:
        return self.indices.shape[1]

    def segments(self, dim: int):
        """The entries of a 2-D pattern listed by row (dim 0) or by column (dim 1), as GPU
        (ptr, perm, seg, other) for ops/sparse.py."""
        found = self._cache.get(("segments", dim))
        if found is None:
            keys, other = self.indices[dim], self.indices[1 - dim]
            ptr, perm, seg, _, _ = _grouped(keys, self.sparse_shape[dim])
            found = self._cache[("segments", dim)] = _dev_buffers((ptr, perm, seg, other[perm]))
        return found

    def grouping(self, dims: tuple):
        """The entries grouped by their indices in `dims` (sorted distinct index tuples):
        (GPU ptr, GPU perm, GPU segment of each entry, the distinct keys, their count)."""
        found = self._cache.get(("group", dims))
        if found is None:
            sizes = tuple(self.sparse_shape[d] for d in dims)
            keys = (np.ravel_multi_index(tuple(self.indices[list(dims)]), sizes).astype(np.int64)
                    if self.nnz and dims else np.zeros(self.nnz, np.int64))
            ptr, perm, _, uniq, inverse = _grouped(keys)
            found = self._cache[("group", dims)] = (*_dev_buffers((ptr, perm, inverse)), uniq, len(uniq))
        return found

    def positions(self, inner: int):
        """The flat dense position of every value element [nnz * inner], as a GPU i32 list."""
        found = self._cache.get(("positions", inner))
        if found is None:
            flat = (self.keys[:, None] * inner + np.arange(inner, dtype=np.int64)[None, :]).reshape(-1)
            found = self._cache[("positions", inner)] = _dev_buffers((flat,))[0]
        return found


# Patterns of recent index Tensors (id -> (weak reference, host array, sparse shape, pattern)):
# a graph network makes `sparse_coo_tensor(edge_index, scores, size)` at every step from the
# same edge_index, whose sorted lists and GPU buffers are then made once. A hit needs the same
# Tensor object holding the same host array (an in-place write replaces or drops it).
_PATTERNS: dict = {}
_PATTERNS_KEPT = 32


def _known_pattern(indices, sparse_shape: tuple):
    if not isinstance(indices, Tensor) or indices._host is None:
        return None
    found = _PATTERNS.get(id(indices))
    if found is None:
        return None
    ref, host, shape, pattern = found
    if ref() is indices and host is indices._host and shape == sparse_shape:
        return pattern
    return None


def _remember_pattern(indices, pattern: "_Pattern") -> None:
    if not isinstance(indices, Tensor) or indices._host is None:
        return
    if len(_PATTERNS) >= _PATTERNS_KEPT:
        del _PATTERNS[next(iter(_PATTERNS))]
    _PATTERNS[id(indices)] = (weakref.ref(indices), indices._host, pattern.sparse_shape, pattern)


def _host_indices(op: str, indices) -> np.ndarray:
    """Indices (a Tensor, array or nested list) as a host int64 array [sparse_dim, nnz]."""
    if isinstance(indices, Tensor):
        if isinstance(indices, SparseTensor):
            raise ValueError(f"{op}: indices must be a dense integer tensor, got a sparse tensor")
        if indices.dtype.is_floating_point or indices.dtype is dtypes.bool:
            raise ValueError(f"{op}: indices must be an integer tensor, got dtype {indices.dtype}")
        host = indices._host if indices._host is not None else indices.numpy()
    else:
        host = np.asarray(indices)
        if host.size and host.dtype.kind not in "iu":
            raise ValueError(f"{op}: indices must be integers, got {host.dtype}")
    host = np.array(host, dtype=np.int64)  # a copy: the pattern must not change under the tensor
    if host.ndim == 1 and host.size == 0:
        host = host.reshape(1, 0)
    if host.ndim != 2:
        raise ValueError(f"{op}: indices must have shape [sparse_dim, nnz], got shape {host.shape}")
    host.setflags(write=False)
    return host


def _values_tensor(op: str, values, dtype) -> Tensor:
    if isinstance(values, SparseTensor):
        raise ValueError(f"{op}: values must be a dense tensor, got a sparse tensor")
    if not isinstance(values, Tensor):
        values = tensor(values, dtype=dtype)
    if dtype is not None:
        wanted = dtypes.to_dtype(dtype, op)
        if values.dtype is not wanted:
            values = values.to(wanted)
    if values.dtype not in _DTYPES:
        raise ValueError(f"{op}: values of dtype {values.dtype} are not supported by anygpu's sparse tensors "
                         f"(float32, int32, int64)")
    if values.ndim == 0:
        raise ValueError(f"{op}: values must have at least one dimension [nnz, *dense_dims], got a 0-d tensor")
    return values


def sparse_coo_tensor(indices, values, size=None, dtype=None, device=None, requires_grad: bool = False,
                      check_invariants=None, is_coalesced: bool | None = None) -> "SparseTensor":
    """torch.sparse_coo_tensor: the elements at `indices` [sparse_dim, nnz] hold `values`
    [nnz, *dense_dims]; `size` defaults to one past the largest index of each sparse dim.
    Duplicate indices are allowed (they add up). requires_grad=True makes the result a leaf
    whose `.grad` is sparse; values that require grad keep their graph."""
    op = "sparse_coo_tensor"
    placement.check_device(op, device)
    idx = _host_indices(op, indices)
    vals = _values_tensor(op, values, dtype)
    sparse_dim, nnz = idx.shape
    if vals.shape[0] != nnz:
        raise ValueError(f"{op}: indices list {nnz} elements (shape {idx.shape}) but values has "
                         f"{vals.shape[0]} (shape {vals.shape}); they must match")
    if nnz and idx.min() < 0:
        raise ValueError(f"{op}: indices must be non-negative, found {int(idx.min())}")
    if nnz and idx.max() > _INDEX_LIMIT:
        raise ValueError(f"{op}: index {int(idx.max())} is over anygpu's 32-bit limit")
    if size is None:
        sparse_shape = tuple(int(m) + 1 for m in idx.max(axis=1)) if nnz else (0,) * sparse_dim
        shape = sparse_shape + tuple(vals.shape[1:])
    else:
        shape = tuple(int(s) for s in (size.shape if isinstance(size, Tensor) else size))
        if len(shape) != sparse_dim + vals.ndim - 1:
            raise ValueError(f"{op}: size {shape} has {len(shape)} dims, expected sparse_dim + dense_dim = "
                             f"{sparse_dim} + {vals.ndim - 1} (indices {idx.shape}, values {vals.shape})")
        if tuple(shape[sparse_dim:]) != tuple(vals.shape[1:]):
            raise ValueError(f"{op}: size {shape} ends in {shape[sparse_dim:]} but the values' dense dims "
                             f"are {vals.shape[1:]}")
        if any(s < 0 for s in shape):
            raise ValueError(f"{op}: size must not be negative, got {shape}")
        if nnz:
            too_big = [(d, int(idx[d].max()), shape[d]) for d in range(sparse_dim) if idx[d].max() >= shape[d]]
            if too_big:
                d, found, limit = too_big[0]
                raise ValueError(f"{op}: index {found} in dim {d} is out of range for size {shape} "
                                 f"(it must be below {limit})")
    elements = 1
    for extent in shape[:sparse_dim]:
        elements *= extent
    if elements > 2**62:
        raise ValueError(f"{op}: size {shape} has {elements} sparse positions, more than anygpu indexes (2**62)")
    if requires_grad:
        if not vals.dtype.is_floating_point:
            raise ValueError(f"{op}: only float tensors can require gradients, got dtype {vals.dtype}")
        vals = vals.detach().clone().requires_grad_(True)
    pattern = _known_pattern(indices, shape[:sparse_dim])
    if pattern is None or not np.array_equal(pattern.indices, idx):
        pattern = _Pattern(idx, shape[:sparse_dim])
        _remember_pattern(indices, pattern)
    coalesced = bool(is_coalesced) if is_coalesced is not None else False
    if coalesced and not pattern.sorted_unique:
        raise ValueError(f"{op}: is_coalesced=True but the indices are not sorted and distinct")
    return SparseTensor._make(pattern, vals, shape, coalesced)


def _unsupported(name: str):
    def refuse(self, *args, **kwargs):
        raise NotImplementedError(f"{name}: not supported for sparse COO tensors (layout=torch.sparse_coo) in "
                                  f"anygpu; call .to_dense() first")
    refuse.__name__ = name
    return refuse


class SparseTensor(Tensor):
    """A sparse COO tensor (see the module doc). Made by `sparse_coo_tensor` or `to_sparse`."""

    __slots__ = ("_pattern", "_values", "_coalesced", "_grad_view")

    @classmethod
    def _make(cls, pattern: _Pattern, values: Tensor, shape: tuple, coalesced: bool) -> "SparseTensor":
        out = cls.__new__(cls)
        # Tensor's own fields as its constructor sets them for a value without data (written
        # through Tensor's slots: `_buf`, `requires_grad` and `grad` are properties here).
        template = Tensor(None, shape, values.dtype)
        for name in getattr(Tensor, "__slots__", ()):
            slot = vars(Tensor).get(name)
            if name != "__weakref__" and hasattr(slot, "__set__") and hasattr(template, name):
                slot.__set__(out, slot.__get__(template))
        vars(Tensor)["_key"].__set__(out, id(out))
        out._pattern, out._values, out._coalesced = pattern, values, coalesced
        out.shape = tuple(shape)
        out.dtype = values.dtype
        out._grad_view = None
        return out

    # ------------------------------------------------------------- what it is
    @property
    def _buf(self):
        raise NotImplementedError("this operation is not supported for sparse COO tensors (layout=torch.sparse_coo) "
                                  "in anygpu; call .to_dense() first")

    @property
    def is_sparse(self) -> bool:
        return True

    @property
    def layout(self) -> layout:
        return sparse_coo

    @property
    def device(self):
        return self._values.device

    @property
    def _dev(self):
        return self._values._dev

    @property
    def requires_grad(self) -> bool:  # type: ignore[override]
        return self._values.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        self.requires_grad_(flag)

    def requires_grad_(self, flag: bool = True) -> "SparseTensor":
        if not self._values.is_leaf:
            raise RuntimeError("requires_grad_: only a leaf sparse tensor's flag can be changed; "
                               "use detach() for a leaf")
        self._values.requires_grad_(flag)
        return self

    @property
    def is_leaf(self) -> bool:
        return self._values.is_leaf

    @property
    def grad_fn(self):
        return self._values.grad_fn

    @property
    def grad(self):  # type: ignore[override]
        """The gradient of a sparse leaf: sparse, with this tensor's indices."""
        values_grad = self._values.grad
        if values_grad is None:
            return None
        view = self._grad_view
        if view is None or view[0] is not values_grad:
            sparse = SparseTensor._make(self._pattern, values_grad, self.shape, self._coalesced)
            view = self._grad_view = (values_grad, sparse)
        return view[1]

    @grad.setter
    def grad(self, value) -> None:
        if value is None:
            self._values.grad = None
            return
        if not isinstance(value, SparseTensor) or value.shape != self.shape:
            raise ValueError(f"grad: a sparse tensor's gradient must be a sparse tensor of shape {self.shape}")
        aligned = value if value._pattern is self._pattern else None
        if aligned is None:
            raise ValueError("grad: the gradient of a sparse tensor must have the same indices")
        self._values.grad = aligned._values

    def sparse_dim(self) -> int:
        return self._pattern.indices.shape[0]

    def dense_dim(self) -> int:
        return len(self.shape) - self.sparse_dim()

    def _nnz(self) -> int:
        return self._pattern.nnz

    def is_coalesced(self) -> bool:
        return self._coalesced

    def _indices(self) -> Tensor:
        return tensor(self._pattern.indices, dtype=int64)

    def _values_(self) -> Tensor:
        return self._values

    def indices(self) -> Tensor:
        if not self._coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call .coalesce() first")
        return self._indices()

    def values(self) -> Tensor:
        if not self._coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call .coalesce() first")
        return self._values

    def __repr__(self) -> str:
        body = (f"tensor(indices={self._indices()!r},\n       values={self._values!r},\n"
                f"       size={self.shape}, nnz={self._nnz()}")
        if self.dtype is not float32 and self.dtype is not int64:
            body += f", dtype={self.dtype}"
        return body + ", layout=torch.sparse_coo)"

    def __deepcopy__(self, memo):
        values = self._values.detach().clone().requires_grad_(self._values.requires_grad)
        out = SparseTensor._make(self._pattern, values, self.shape, self._coalesced)
        memo[id(self)] = out
        return out

    def detach(self) -> "SparseTensor":
        return SparseTensor._make(self._pattern, self._values.detach(), self.shape, self._coalesced)

    def clone(self) -> "SparseTensor":
        return SparseTensor._make(self._pattern, self._values.clone(), self.shape, self._coalesced)

    def to(self, *args, **kwargs) -> "SparseTensor":
        """Device arguments are checked (placement.py); a dtype converts the values."""
        values = self._values.to(*args, **kwargs)
        if values is self._values:
            return self
        return SparseTensor._make(self._pattern, _values_tensor("to", values, None), self.shape, self._coalesced)

    def cuda(self, device=None, non_blocking: bool = False) -> "SparseTensor":
        placement.check_device("cuda", "cuda" if device is None else device)
        return self

    def cpu(self) -> "SparseTensor":
        return self

    def float(self) -> "SparseTensor":
        return self.to(float32)

    def long(self) -> "SparseTensor":
        return self.to(int64)

    def int(self) -> "SparseTensor":
        return self.to(int32)

    def type(self, dtype=None, non_blocking: bool = False):
        if dtype is None:
            return "torch.sparse." + {float32: "FloatTensor", int32: "IntTensor", int64: "LongTensor"}[self.dtype]
        return self.to(dtype)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def to_sparse(self, sparse_dim: int | None = None) -> "SparseTensor":
        if sparse_dim is not None and sparse_dim != self.sparse_dim():
            raise ValueError(f"to_sparse: this tensor already has sparse_dim {self.sparse_dim()}; "
                             f"changing it to {sparse_dim} is not supported")
        return self

    # ------------------------------------------------------------- conversions
    def coalesce(self) -> "SparseTensor":
        """Indices sorted and distinct, duplicates' values summed (on the GPU)."""
        if self._coalesced:
            return self
        pattern = self._pattern
        if pattern.sorted_unique:
            return SparseTensor._make(pattern, self._values, self.shape, True)
        ptr, perm, segment_of, uniq, count = pattern.grouping(tuple(range(self.sparse_dim())))
        values = _segment_sum(self._values, ptr, perm, segment_of, count)
        merged = pattern._cache.get("coalesced")
        if merged is None:
            indices = np.stack(np.unravel_index(uniq, pattern.sparse_shape)).astype(np.int64).reshape(
                self.sparse_dim(), count)
            indices.setflags(write=False)
            merged = pattern._cache["coalesced"] = _Pattern(indices, pattern.sparse_shape)
        return SparseTensor._make(merged, values, self.shape, True)

    def to_dense(self, dtype=None, *, masked_grad=None) -> Tensor:
        """The dense tensor (duplicates summed), differentiable in the values."""
        c = self.coalesce()
        values = c._values.contiguous()
        inner = int(np.prod(self.shape[self.sparse_dim():], dtype=np.int64))
        total = int(np.prod(self.shape, dtype=np.int64))
        if total > _INDEX_LIMIT:
            raise ValueError(f"to_dense: {total} elements is over anygpu's 32-bit limit for one tensor")
        dev = gpu()
        buf = dev.alloc(total, values._buf.dtype)
        positions = c._pattern.positions(inner)
        if positions.len:
            dev.index_put(buf, positions, values._buf)
        out = Tensor(buf, self.shape, values.dtype)
        if values.dtype.is_floating_point:
            _attach("sparse_to_dense", out, (values,), rule("sparse_to_dense", dev, positions, total))
        return out if dtype is None else out.to(dtype)

    # ------------------------------------------------------------- arithmetic
    def t(self) -> "SparseTensor":
        if self.sparse_dim() != 2 or self.dense_dim() != 0:
            raise ValueError(f"t: expects a 2-D sparse matrix, got shape {self.shape} "
                             f"(sparse_dim {self.sparse_dim()}, dense_dim {self.dense_dim()})")
        indices = self._pattern.indices[::-1].copy()
        indices.setflags(write=False)
        shape = (self.shape[1], self.shape[0])
        return SparseTensor._make(_Pattern(indices, shape), self._values, shape, False)

    @property
    def T(self) -> "SparseTensor":  # type: ignore[override]
        return self.t()

    @property
    def mT(self) -> "SparseTensor":  # type: ignore[override]
        return self.t()

    def transpose(self, dim0: int, dim1: int) -> "SparseTensor":
        dims = sorted(d % 2 if self.ndim == 2 else d for d in (dim0, dim1))
        if self.ndim != 2 or self.dense_dim() != 0:
            raise ValueError(f"transpose: anygpu transposes 2-D sparse matrices only, got shape {self.shape}")
        return self if dims[0] == dims[1] else self.t()

    def mm(self, other) -> Tensor:
        return mm(self, other)

    def matmul(self, other) -> Tensor:
        return matmul(self, other)

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def __add__(self, other):
        return _add(self, other)

    def __radd__(self, other):
        return _add(other, self)

    def add(self, other, alpha=1):
        return _add(self, other * alpha if alpha != 1 else other)

    def __sub__(self, other):
        return _add(self, -other)

    def __rsub__(self, other):
        return _add(other, -self)  # dense - sparse

    def sub(self, other, alpha=1):
        return _add(self, -(other * alpha) if alpha != 1 else -other)

    def __neg__(self):
        return self._scaled(-1)

    def neg(self):
        return self._scaled(-1)

    def __mul__(self, other):
        return self._scaled(other, "mul")

    def __rmul__(self, other):
        return self._scaled(other, "mul")

    def mul(self, other):
        return self._scaled(other, "mul")

    def __truediv__(self, other):
        return self._scaled(other, "div")

    def div(self, other):
        return self._scaled(other, "div")

    def _scaled(self, factor, op: str = "mul") -> "SparseTensor":
        if isinstance(factor, Tensor) and factor.ndim == 0 and not isinstance(factor, SparseTensor):
            values = self._values * factor if op == "mul" else self._values / factor
        elif isinstance(factor, (int, float, np.number)) and not isinstance(factor, bool):
            values = self._values * factor if op == "mul" else self._values / factor
        else:
            got = (f"a {'sparse' if isinstance(factor, SparseTensor) else 'dense'} tensor of shape "
                   f"{tuple(factor.shape)}" if isinstance(factor, Tensor) else type(factor).__name__)
            raise NotImplementedError(f"sparse {op}: anygpu multiplies or divides a sparse tensor by a scalar "
                                      f"(a number or 0-d tensor) only, got {got}; call .to_dense() first")
        return SparseTensor._make(self._pattern, values, self.shape, self._coalesced)

    def sum(self, dim=None, keepdim: bool = False, dtype=None):
        if keepdim:
            raise ValueError("sum: keepdim=True is not supported for sparse tensors (torch.sparse.sum has none)")
        return sum(self, dim, dtype)

    def softmax(self, dim: int, dtype=None) -> "SparseTensor":
        return softmax(self, dim, dtype)

    def size(self, dim: int | None = None):
        if dim is None:
            return self.shape
        if not -len(self.shape) <= dim < len(self.shape):
            raise IndexError(f"size: dim {dim} is out of range for {len(self.shape)} dims")
        return self.shape[dim]


# Dense methods with no sparse form: refused by name (the `_buf` property refuses the rest).
for _name in ("numpy", "tolist", "item", "reshape", "view", "permute", "__getitem__", "__setitem__"):
    setattr(SparseTensor, _name, _unsupported(_name))


# ------------------------------------------------------------- differentiable pieces

def _segment_sum(values: Tensor, ptr, perm, segment_of, segments: int) -> Tensor:
    """The sum of each segment's entries (rows of values' trailing dims), recorded."""
    values = values.contiguous()
    inner = int(np.prod(values.shape[1:], dtype=np.int64))
    dev = gpu()
    out = Tensor(dev.segment_sum(ptr, perm, values._buf, segments, inner), (segments, *values.shape[1:]),
                 values.dtype)
    if values.dtype.is_floating_point:
        _attach("segment_sum", out, (values,), rule("segment_sum", dev, segment_of, segments, inner))
    return out


def _check_matrix(op: str, s: SparseTensor) -> None:
    if s.sparse_dim() != 2 or s.dense_dim() != 0:
        raise ValueError(f"{op}: expects a 2-D sparse matrix (sparse_dim 2, dense_dim 0), got shape {s.shape} "
                         f"(sparse_dim {s.sparse_dim()}, dense_dim {s.dense_dim()})")
    if s.dtype is not float32:
        raise ValueError(f"{op}: sparse products run on float32 values, got {s.dtype}; use .float()")


def _spmm(op: str, s: SparseTensor, x: Tensor, transposed: bool) -> Tensor:
    """s @ x (transposed: s^T @ x) for a 2-D sparse s and a dense 2-D float32 x, recorded
    for the gradients of s's values and of x."""
    rows, inner = (s.shape[1], s.shape[0]) if transposed else s.shape
    if x.ndim != 2:
        raise ValueError(f"{op}: the dense operand must be 2-D, got shape {x.shape}")
    if x.dtype is not float32:
        raise ValueError(f"{op}: the dense operand must be float32, got {x.dtype}")
    if x.shape[0] != inner:
        shape = (rows, inner)
        raise ValueError(f"{op}: shapes {shape} (sparse) and {x.shape} cannot be multiplied ({inner} != {x.shape[0]})")
    cols = x.shape[1]
    if max(rows, inner, rows * cols, x.numel()) > _INDEX_LIMIT:
        raise ValueError(f"{op}: a product of {(rows, inner)} (sparse) and {x.shape} is over anygpu's 32-bit "
                         f"limit for one tensor")
    x = x.contiguous()
    values = s._values.contiguous()
    dev = gpu()
    forward = s._pattern.segments(1 if transposed else 0)
    backward = s._pattern.segments(0 if transposed else 1)
    ptr, perm, _, other = forward
    out = Tensor(dev.spmm(ptr, perm, other, values._buf, x._buf, rows, inner, cols), (rows, cols))
    needs = (values.requires_grad, x.requires_grad)
    return _attach("spmm", out, (values, x),
                   rule("spmm", dev, values._buf, x._buf, forward, backward, rows, inner, cols, needs=needs))


def _dense(op: str, value) -> Tensor:
    if isinstance(value, Tensor):
        return value
    try:
        return tensor(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{op}: expected a tensor, got {type(value).__name__}") from exc


def mm(mat1, mat2) -> Tensor:
    """torch.sparse.mm / torch.mm with a sparse operand: sparse [m, k] @ dense [k, n] or
    dense [m, k] @ sparse [k, n] -> dense [m, n], with gradients for the dense operand and
    the sparse values. Sparse @ sparse is not supported."""
    op = "sparse.mm"
    a_sparse, b_sparse = isinstance(mat1, SparseTensor), isinstance(mat2, SparseTensor)
    if a_sparse and b_sparse:
        raise NotImplementedError(f"{op}: sparse @ sparse is not supported by anygpu; make one operand dense "
                                  f"with .to_dense()")
    if not a_sparse and not b_sparse:
        a, b = _dense(op, mat1), _dense(op, mat2)
        return a.mm(b)
    if a_sparse:
        _check_matrix(op, mat1)
        dense = _dense(op, mat2)
        if dense.ndim != 2:
            raise ValueError(f"{op}: expects a 2-D dense operand, got shape {dense.shape}")
        return _spmm(op, mat1, dense, transposed=False)
    _check_matrix(op, mat2)
    dense = _dense(op, mat1)
    if dense.ndim != 2:
        raise ValueError(f"{op}: expects a 2-D dense operand, got shape {dense.shape}")
    if dense.shape[1] != mat2.shape[0]:
        raise ValueError(f"{op}: shapes {dense.shape} and {mat2.shape} (sparse) cannot be multiplied "
                         f"({dense.shape[1]} != {mat2.shape[0]})")
    # dense @ s = (s^T @ dense^T)^T: s's entries listed by column.
    return _spmm(op, mat2, dense.t(), transposed=True).t()


def matmul(input, other) -> Tensor:
    """torch.matmul with sparse operands: a 2-D sparse matrix times a dense matrix or vector
    (either order); dense operands take the dense matmul."""
    if not isinstance(input, SparseTensor) and not isinstance(other, SparseTensor):
        return _dense_matmul(input, other)
    op = "matmul"
    if isinstance(input, SparseTensor) and not isinstance(other, SparseTensor):
        dense = _dense(op, other)
        if dense.ndim == 1:
            return mm(input, dense.unsqueeze(1)).squeeze(1)
        if dense.ndim != 2:
            raise ValueError(f"{op}: a sparse matrix multiplies a 1-D or 2-D dense tensor, got shape {dense.shape}")
        return mm(input, dense)
    if isinstance(other, SparseTensor) and not isinstance(input, SparseTensor):
        dense = _dense(op, input)
        if dense.ndim == 1:
            return mm(dense.unsqueeze(0), other).squeeze(0)
        if dense.ndim != 2:
            raise ValueError(f"{op}: a sparse matrix multiplies a 1-D or 2-D dense tensor, got shape {dense.shape}")
        return mm(dense, other)
    return mm(input, other)


def addmm(input, mat1, mat2, *, beta=1, alpha=1) -> Tensor:
    """torch.sparse.addmm: beta * input + alpha * (mat1 @ mat2) with a sparse mat1."""
    product = mm(mat1, mat2)
    if alpha != 1:
        product = product * alpha
    dense = input.to_dense() if isinstance(input, SparseTensor) else _dense("sparse.addmm", input)
    return product + (dense * beta if beta != 1 else dense)


def _add(a, b):
    """sparse + sparse -> sparse (indices joined, duplicates summed when both were coalesced);
    dense + sparse -> dense. sparse + dense is refused, as torch refuses it."""
    if isinstance(a, SparseTensor) and isinstance(b, SparseTensor):
        if a.shape != b.shape:
            raise ValueError(f"add: sparse tensors of shapes {a.shape} and {b.shape} cannot be added; "
                             f"they must match")
        if a.sparse_dim() != b.sparse_dim():
            raise ValueError(f"add: sparse tensors with sparse_dim {a.sparse_dim()} and {b.sparse_dim()} "
                             f"cannot be added")
        va, vb = a._values, b._values
        if va.dtype is not vb.dtype:
            result = dtypes.promote(va.dtype, vb.dtype)
            va, vb = va.to(result), vb.to(result)
        indices = np.concatenate([a._pattern.indices, b._pattern.indices], axis=1)
        indices.setflags(write=False)
        joined = SparseTensor._make(_Pattern(indices, a._pattern.sparse_shape), cat([va, vb], 0), a.shape, False)
        return joined.coalesce() if a._coalesced and b._coalesced else joined
    if isinstance(a, SparseTensor):
        raise ValueError(f"add: sparse + dense ({type(b).__name__}) is not supported, as in torch; write "
                         f"dense + sparse")
    return a + b.to_dense()


def sum(input: SparseTensor, dim=None, dtype=None):
    """torch.sparse.sum: over everything (a dense 0-d tensor), or over `dim` (an int or a
    tuple): sparse while sparse dims remain, else dense."""
    op = "sparse.sum"
    if not isinstance(input, SparseTensor):
        raise ValueError(f"{op}: expects a sparse tensor, got {type(input).__name__}")
    values = input._values if dtype is None else input._values.to(dtype)
    if dim is None:
        return values.sum()
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    ndim = input.ndim
    normal = []
    for d in dims:
        if not -ndim <= d < ndim:
            raise ValueError(f"{op}: dim {d} is out of range for a tensor of {ndim} dims")
        normal.append(int(d) % ndim)
    if len(set(normal)) != len(normal):
        raise ValueError(f"{op}: dim {dims} repeats a dimension")
    sd = input.sparse_dim()
    sparse_kept = tuple(d for d in range(sd) if d not in normal)
    dense_summed = sorted(1 + d - sd for d in normal if d >= sd)
    if dense_summed:
        values = values.sum(dim=tuple(dense_summed))
    if len(sparse_kept) == sd:
        return SparseTensor._make(input._pattern, values, _kept_shape(input.shape, normal), input._coalesced)
    if not sparse_kept:
        return values.sum(dim=0)
    ptr, perm, segment_of, uniq, count = input._pattern.grouping(sparse_kept)
    summed = _segment_sum(values, ptr, perm, segment_of, count)
    kept_shape = tuple(input.shape[d] for d in sparse_kept)
    indices = np.stack(np.unravel_index(uniq, kept_shape)).astype(np.int64).reshape(len(sparse_kept), count)
    indices.setflags(write=False)
    return SparseTensor._make(_Pattern(indices, kept_shape), summed, _kept_shape(input.shape, normal), True)


def _kept_shape(shape: tuple, summed: list) -> tuple:
    return tuple(s for d, s in enumerate(shape) if d not in summed)


def softmax(input: SparseTensor, dim: int, dtype=None) -> SparseTensor:
    """torch.sparse.softmax: a softmax over the specified elements along `dim` (unspecified
    ones count as -inf); the result has the input's (coalesced) indices."""
    op = "sparse.softmax"
    if not isinstance(input, SparseTensor):
        raise ValueError(f"{op}: expects a sparse tensor, got {type(input).__name__}")
    if not -input.ndim <= dim < input.ndim:
        raise ValueError(f"{op}: dim {dim} is out of range for a tensor of {input.ndim} dims")
    dim = int(dim) % input.ndim
    s = input if dtype is None else input.to(dtype)
    if s.dtype is not float32:
        raise ValueError(f"{op}: expects float32 values, got {s.dtype}")
    s = s.coalesce()
    sd = s.sparse_dim()
    values = s._values.contiguous()
    if dim >= sd:  # along a dense dim every element is specified: a dense softmax of the values
        return SparseTensor._make(s._pattern, values.softmax(dim - sd + 1), s.shape, True)
    ptr, perm, _, _, count = s._pattern.grouping(tuple(d for d in range(sd) if d != dim))
    inner = int(np.prod(values.shape[1:], dtype=np.int64))
    dev = gpu()
    out = Tensor(dev.segment_softmax(ptr, perm, values._buf, count, inner), values.shape)
    _attach("sparse_softmax", out, (values,), rule("sparse_softmax", dev, out._buf, ptr, perm, count, inner))
    return SparseTensor._make(s._pattern, out, s.shape, True)


def log_softmax(input: SparseTensor, dim: int, dtype=None) -> SparseTensor:
    """torch.sparse.log_softmax: the log of `softmax` over the specified elements."""
    probs = softmax(input, dim, dtype)
    return SparseTensor._make(probs._pattern, probs._values.log(), probs.shape, True)


# ------------------------------------------------------------- dense tensors' sparse methods

def _to_sparse(self: Tensor, sparse_dim: int | None = None) -> SparseTensor:
    """Tensor.to_sparse: the nonzero elements (a host read of the tensor finds them; their
    values are gathered on the GPU, differentiably). With sparse_dim < ndim, an entry is a
    block of the trailing dims with any nonzero element."""
    op = "to_sparse"
    if isinstance(self, SparseTensor):
        return self.to_sparse(sparse_dim)
    if self.ndim == 0:
        raise ValueError(f"{op}: a 0-d tensor has no sparse form")
    sd = self.ndim if sparse_dim is None else int(sparse_dim)
    if not 0 < sd <= self.ndim:
        raise ValueError(f"{op}: sparse_dim must be in 1..{self.ndim}, got {sparse_dim}")
    if self.dtype not in _DTYPES:
        raise ValueError(f"{op}: tensors of dtype {self.dtype} are not supported (float32, int32, int64)")
    total = self.numel()
    if total > _INDEX_LIMIT:
        raise ValueError(f"{op}: {total} elements is over anygpu's 32-bit limit")
    host = self.numpy()
    blocks = host.reshape(*self.shape[:sd], -1) if sd < self.ndim else host[..., None]
    nonzero = np.any(blocks != 0, axis=-1) if blocks.shape[-1] else np.zeros(self.shape[:sd], bool)
    indices = np.stack(np.nonzero(nonzero)).astype(np.int64).reshape(sd, -1)
    indices.setflags(write=False)
    pattern = _Pattern(indices, tuple(self.shape[:sd]))
    inner = int(np.prod(self.shape[sd:], dtype=np.int64))
    positions = pattern.positions(inner)
    x = self.contiguous()
    dev = gpu()
    nnz = pattern.nnz
    buf = dev.gather_axis(x._buf, positions, 1, total, positions.len, 1) if positions.len else dev.empty(0, x._buf.dtype)
    values = Tensor(buf, (nnz, *self.shape[sd:]), self.dtype)
    if self.dtype.is_floating_point:
        _attach("sparse_gather", values, (x,), rule("sparse_gather", dev, positions, total))
    return SparseTensor._make(pattern, values, self.shape, True)


def _to_dense(self: Tensor, dtype=None, *, masked_grad=None) -> Tensor:
    """Tensor.to_dense of a dense tensor: itself (or converted to dtype)."""
    return self if dtype is None else self.to(dtype)


Tensor.to_sparse = _to_sparse  # type: ignore[method-assign]
Tensor.to_sparse_coo = _to_sparse  # type: ignore[attr-defined]
Tensor.to_dense = _to_dense  # type: ignore[attr-defined]
Tensor.is_sparse = property(lambda self: False)  # type: ignore[attr-defined]
Tensor.layout = property(lambda self: strided)  # type: ignore[attr-defined]
SparseTensor.to_sparse_coo = SparseTensor.to_sparse  # type: ignore[attr-defined]


def _sparse_aware(dense_method):
    """A dense Tensor method of a product (x.mm(y), x.matmul(y)) that hands a sparse `other`
    to the sparse product (Python's reflected operators do this for `x @ y` already)."""
    def method(self, other):
        if isinstance(other, SparseTensor):
            return matmul(self, other) if dense_method.__name__ == "matmul" else mm(self, other)
        return dense_method(self, other)
    method.__name__, method.__qualname__, method.__doc__ = (dense_method.__name__, dense_method.__qualname__,
                                                            dense_method.__doc__)
    return method


Tensor.mm = _sparse_aware(Tensor.mm)  # type: ignore[method-assign]
Tensor.matmul = _sparse_aware(Tensor.matmul)  # type: ignore[method-assign]
