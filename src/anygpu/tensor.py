"""Layer 2: Tensor, with PyTorch's names and semantics, recorded onto the autograd engine.

A Tensor is a contiguous row-major GPU Buffer plus a shape and a dtype (float32, or
int32 for indices). Views that are not contiguous (permute, slicing, expand) are
materialised by a strided-gather kernel, so every Tensor's buffer is contiguous.
Each differentiable op below launches its forward kernels and creates, beside them,
the `Entry` whose backward closure routes the output's gradient to the inputs;
`Tensor.backward` sorts the graph into a flat tape and runs the engine's one
`reverse_walk` over it (the same walk the Layer-1 Tape uses).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import namedtuple
from typing import Sequence

import numpy as np

from .autograd.engine import Entry, reverse_walk
from .autograd.rules import backward as rule
from .ops import gpu
from .ops.nd import broadcast_shapes, contiguous_strides, numel

float32 = "float32"
int32 = "int32"
int64 = "int32"  # integer tensors live as int32 on the GPU (WGSL has no portable i64)
long = int64

_BUF_DTYPE = {float32: "f32", int32: "i32"}
_NP_DTYPE = {float32: np.float32, int32: np.int32}

_state = threading.local()
_rng = [np.random.default_rng()]
# Called as hook(leaves) after every backward has written the leaves' .grad (DistributedDataParallel
# averages the gradients across processes there).
post_backward_hooks: list = []

MaxResult = namedtuple("MaxResult", ["values", "indices"])


def is_grad_enabled() -> bool:
    return getattr(_state, "grad_enabled", True)


class no_grad(contextlib.ContextDecorator):
    """Context manager / decorator: ops inside record nothing for autograd."""

    def __enter__(self):
        self._prev = is_grad_enabled()
        _state.grad_enabled = False

    def __exit__(self, *exc):
        _state.grad_enabled = self._prev
        return False


class enable_grad(contextlib.ContextDecorator):
    def __enter__(self):
        self._prev = is_grad_enabled()
        _state.grad_enabled = True

    def __exit__(self, *exc):
        _state.grad_enabled = self._prev
        return False


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand/randn/dropout/initialisation."""
    _rng[0] = np.random.default_rng(int(seed))


def default_generator() -> np.random.Generator:
    return _rng[0]


def _normalize_dtype(dtype) -> str:
    if dtype is None:
        return float32
    if dtype in (float32, int32):
        return dtype
    np_dtype = np.dtype(dtype)
    if np_dtype.kind == "f":
        return float32
    if np_dtype.kind in "iub":
        return int32
    raise ValueError(f"tensor: unsupported dtype {dtype!r} (float32 or int32/int64)")


def _as_shape(op: str, shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: shape must be integers, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"{op}: negative dimension in shape {shape}")
    return shape


def _dim(op: str, dim: int, ndim: int) -> int:
    size = max(ndim, 1)
    if not -size <= dim < size:
        raise IndexError(f"{op}: dimension {dim} out of range for a tensor of {ndim} dims")
    return dim % size


class Tensor:
    """A GPU array with autograd. Build with `anygpu.tensor`, `zeros`, `randn`, ..."""

    __slots__ = ("_buf", "shape", "dtype", "requires_grad", "grad", "_entry", "_parents",
                 "_host", "_retain", "__weakref__")
    # _host: the host array an integer tensor was made from, kept only so index checks
    # (class indices, embedding ids) can run before GPU work. Never used for reads:
    # in-place updates of a shared buffer would leave it stale.
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, buf, shape, dtype: str = float32, requires_grad: bool = False):
        self._buf = buf
        self.shape = tuple(shape)
        self.dtype = dtype
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self._entry: Entry | None = None
        self._parents: tuple = ()
        self._host = None
        self._retain = False

    __hash__ = object.__hash__

    # ------------------------------------------------------------- basics
    @property
    def device(self):
        return self._buf._dev

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return numel(self.shape)

    def size(self, dim: int | None = None):
        return self.shape if dim is None else self.shape[_dim("size", dim, self.ndim)]

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def is_leaf(self) -> bool:
        return self._entry is None

    @property
    def grad_fn(self):
        return self._entry

    def numpy(self) -> np.ndarray:
        """A host copy (float32 or int32) with this tensor's shape."""
        return self.device.read(self._buf).reshape(self.shape)

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item: only one-element tensors can be converted, this one has shape {self.shape}")
        value = self.numpy().reshape(-1)[0]
        return float(value) if self.dtype == float32 else int(value)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise ValueError("the truth value of a tensor with more than one element is ambiguous")
        return bool(self.item())

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), precision=4, separator=", ", prefix="tensor(")
        extra = ""
        if self.dtype != float32:
            extra += f", dtype={self.dtype}"
        if self._entry is not None:
            extra += f", grad_fn=<{self._entry.name}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    def detach(self) -> "Tensor":
        """The same data, cut from the graph (shares the buffer)."""
        out = Tensor(self._buf, self.shape, self.dtype)
        out._host = _view_host(self, self._host)
        return out

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        if flag and self.dtype != float32:
            raise ValueError("requires_grad: only float tensors can require gradients")
        self.requires_grad = flag
        return self

    def retain_grad(self) -> None:
        self._retain = True

    def clone(self) -> "Tensor":
        dev = self.device
        return _record("clone", Tensor(dev.copy(self._buf), self.shape, self.dtype), (self,),
                       rule("clone", dev))

    def contiguous(self) -> "Tensor":
        return self

    def float(self) -> "Tensor":
        return self.to(float32)

    def long(self) -> "Tensor":
        return self.to(int32)

    def int(self) -> "Tensor":
        return self.to(int32)

    def to(self, dtype_or_device=None) -> "Tensor":
        """Convert dtype (float32/int32/int64); a device argument is accepted and kept."""
        if dtype_or_device is None or not isinstance(dtype_or_device, (str, type, np.dtype)) \
                or dtype_or_device in ("cpu", "gpu", "cuda"):
            return self
        dtype = _normalize_dtype(dtype_or_device)
        if dtype == self.dtype:
            return self
        buf = self.device.cast(self._buf, _BUF_DTYPE[dtype])
        return Tensor(buf, self.shape, dtype)

    # ------------------------------------------------------------- autograd
    def backward(self, gradient: "Tensor | None" = None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's `.grad` that requires grad."""
        if not self.requires_grad:
            raise RuntimeError("backward: tensor does not require grad and has no grad_fn")
        dev = self.device
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, "
                                   f"got shape {self.shape}")
            seed = dev.upload(np.ones(1, np.float32))
        else:
            gradient = _to_tensor(gradient, like=self)
            if gradient.shape != self.shape:
                raise ValueError(f"backward: gradient has shape {gradient.shape}, expected {self.shape}")
            seed = gradient._buf
        order = _topological_order(self)
        leaves = {}
        wanted = set()
        for t in order:
            for p in t._parents:
                if p.requires_grad:
                    wanted.add(id(p))
                    if p._entry is None or p._retain:
                        leaves[id(p)] = p
        if self._entry is None or self._retain:
            leaves[id(self)] = self
        grads = {id(self): seed}
        reverse_walk([t._entry for t in order], grads, dev.add,
                     wants_grad=wanted.__contains__, keep=lambda key: key in leaves)
        for key, leaf in leaves.items():
            grad = grads.get(key)
            if grad is None:
                continue
            if leaf.grad is None:
                leaf.grad = Tensor(grad, leaf.shape)
            else:
                leaf.grad = Tensor(dev.add(leaf.grad._buf, grad), leaf.shape)
        for t in order:  # free the graph, as torch does without retain_graph
            t._entry = None
            t._parents = ()
        for hook in tuple(post_backward_hooks):
            hook(list(leaves.values()))

    # ------------------------------------------------------------- operators
    def __add__(self, other):
        return _binary("add", self, other)

    def __radd__(self, other):
        return _binary("add", other, self)

    def __sub__(self, other):
        return _binary("sub", self, other)

    def __rsub__(self, other):
        return _binary("sub", other, self)

    def __mul__(self, other):
        return _binary("mul", self, other)

    def __rmul__(self, other):
        return _binary("mul", other, self)

    def __truediv__(self, other):
        return _binary("div", self, other)

    def __rtruediv__(self, other):
        return _binary("div", other, self)

    def __pow__(self, other):
        if isinstance(other, (int, float)) and other == 2:
            return _unary("square", self)
        return _binary("pow", self, other)

    def __rpow__(self, other):
        return _binary("pow", _to_tensor(other, like=self), self)

    def __neg__(self):
        return _unary("neg", self)

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(_to_tensor(other, like=self), self)

    def __eq__(self, other):  # noqa: D105 — elementwise, as in torch
        return _compare("eq", self, other)

    def __ne__(self, other):
        return _compare("ne", self, other)

    def __lt__(self, other):
        return _compare("lt", self, other)

    def __le__(self, other):
        return _compare("le", self, other)

    def __gt__(self, other):
        return _compare("gt", self, other)

    def __ge__(self, other):
        return _compare("ge", self, other)

    def add(self, other):
        return self + other

    def sub(self, other):
        return self - other

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def pow(self, other):
        return self ** other

    def matmul(self, other):
        return matmul(self, other)

    def maximum(self, other):
        return _binary("maximum", self, other)

    def minimum(self, other):
        return _binary("minimum", self, other)

    # ------------------------------------------------------------- unary math
    def exp(self):
        return _unary("exp", self)

    def log(self):
        return _unary("log", self)

    def sqrt(self):
        return _unary("sqrt", self)

    def abs(self):
        return _unary("abs", self)

    def relu(self):
        return _unary("relu", self)

    def sigmoid(self):
        return _unary("sigmoid", self)

    def tanh(self):
        return _unary("tanh_act", self)

    def neg(self):
        return _unary("neg", self)

    def square(self):
        return _unary("square", self)

    def reciprocal(self):
        return _unary("reciprocal", self)

    def rsqrt(self):
        return _unary("reciprocal", _unary("sqrt", self))

    def sin(self):
        return _unary("sin", self)

    def cos(self):
        return _unary("cos", self)

    def __abs__(self):
        return _unary("abs", self)

    def clamp(self, min=None, max=None):
        lo = -math.inf if min is None else float(min)
        hi = math.inf if max is None else float(max)
        return _unary("clamp", self, lo, hi)

    clip = clamp

    # ------------------------------------------------------------- reductions
    def sum(self, dim=None, keepdim: bool = False):
        return _reduce_sum(self, dim, keepdim)

    def mean(self, dim=None, keepdim: bool = False):
        total = _reduce_sum(self, dim, keepdim)
        if self.numel() == 0:  # a mean over nothing is NaN, as in torch
            return total * math.nan
        return total * (1.0 / (self.numel() // max(total.numel(), 1)))

    def max(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):  # torch.max(a, b): the elementwise maximum
            return self.maximum(dim)
        return _reduce_extreme("max", self, dim, keepdim)

    def min(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        return _reduce_extreme("min", self, dim, keepdim)

    def var(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        """Variance over dim (all dims by default), divided by n - correction
        (correction 1 unless unbiased=False or correction says otherwise), as torch."""
        if isinstance(dim, bool):  # x.var(False): the legacy unbiased argument
            dim, unbiased = None, dim
        if correction is None:
            correction = 0 if unbiased is False else 1
        centered = self - self.mean(dim, keepdim=True)
        total = (centered * centered).sum(dim, keepdim=keepdim)
        divisor = (self.numel() // max(total.numel(), 1) if self.numel() else 0) - correction
        return total * (1.0 / divisor if divisor > 0 else math.nan)

    def std(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        return self.var(dim, unbiased, keepdim, correction=correction).sqrt()

    def logsumexp(self, dim, keepdim: bool = False):
        return logsumexp(self, dim, keepdim)

    def argmax(self, dim=None, keepdim: bool = False):
        return _arg_reduce("argmax", self, dim, keepdim)

    def argmin(self, dim=None, keepdim: bool = False):
        return _arg_reduce("argmin", self, dim, keepdim)

    def softmax(self, dim: int = -1):
        return softmax(self, dim)

    def log_softmax(self, dim: int = -1):
        return log_softmax(self, dim)

    # ------------------------------------------------------------- shapes
    def reshape(self, *shape):
        return reshape(self, shape)

    def view(self, *shape):
        return reshape(self, shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        if self.ndim == 0:
            return reshape(self, (1,))
        start, end = _dim("flatten", start_dim, self.ndim), _dim("flatten", end_dim, self.ndim)
        shape = self.shape[:start] + (numel(self.shape[start:end + 1]),) + self.shape[end + 1:]
        return reshape(self, shape)

    def unsqueeze(self, dim: int):
        dim = _dim("unsqueeze", dim, self.ndim + 1)
        return reshape(self, self.shape[:dim] + (1,) + self.shape[dim:])

    def squeeze(self, dim=None):
        if dim is None:
            return reshape(self, tuple(s for s in self.shape if s != 1))
        dim = _dim("squeeze", dim, self.ndim)
        if self.shape[dim] != 1:
            return self
        return reshape(self, self.shape[:dim] + self.shape[dim + 1:])

    def permute(self, *dims):
        return permute(self, dims)

    def transpose(self, dim0: int, dim1: int):
        dims = list(range(self.ndim))
        a, b = _dim("transpose", dim0, self.ndim), _dim("transpose", dim1, self.ndim)
        dims[a], dims[b] = dims[b], dims[a]
        return permute(self, dims)

    @property
    def T(self):
        return permute(self, tuple(reversed(range(self.ndim))))

    def t(self):
        if self.ndim > 2:
            raise ValueError(f"t: expects a tensor with <= 2 dims, got {self.ndim}")
        return self.T

    def expand(self, *shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return expand(self, tuple(int(s) for s in shape))

    def __getitem__(self, index):
        if isinstance(index, (Tensor, list, np.ndarray)):  # x[indices]: rows picked along dim 0
            return index_select(self, 0, index)
        return getitem(self, index)

    def masked_fill(self, mask, value) -> "Tensor":
        """value where mask is nonzero, self elsewhere (mask broadcasts to self's shape)."""
        mask = _to_tensor(mask)
        if broadcast_shapes("masked_fill", self.shape, mask.shape) != self.shape:
            raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to {self.shape}")
        return where(mask, value, self)

    def gather(self, dim: int, index) -> "Tensor":
        return gather(self, dim, index)

    def index_select(self, dim: int, index) -> "Tensor":
        return index_select(self, dim, index)

    def chunk(self, chunks: int, dim: int = 0):
        d = _dim("chunk", dim, self.ndim)
        if chunks < 1:
            raise ValueError(f"chunk: chunks must be >= 1, got {chunks}")
        return self.split(-(-self.shape[d] // chunks) or 1, d)

    def split(self, split_size_or_sections, dim: int = 0):
        """Views (copies) of consecutive pieces along dim: equal sizes or a list of sizes."""
        d = _dim("split", dim, self.ndim)
        size = self.shape[d]
        if isinstance(split_size_or_sections, int):
            step = split_size_or_sections
            if step < 1:
                raise ValueError(f"split: split_size must be >= 1, got {step}")
            sections = [min(step, size - start) for start in range(0, size, step)] or [0]
        else:
            sections = [int(s) for s in split_size_or_sections]
            if sum(sections) != size:
                raise ValueError(f"split: sections {sections} do not add up to size {size} of dim {d}")
        pieces, start = [], 0
        for length in sections:
            index = (slice(None),) * d + (slice(start, start + length),)
            pieces.append(getitem(self, index))
            start += length
        return tuple(pieces)

    def tril(self, diagonal: int = 0) -> "Tensor":
        return _triangle(self, diagonal, lower=True)

    def triu(self, diagonal: int = 0) -> "Tensor":
        return _triangle(self, diagonal, lower=False)

    def zero_(self):
        self.device.write(self._buf, np.zeros(self.numel(), _NP_DTYPE[self.dtype]))
        self._host = None
        return self


# ===================================================================== construction

def _wrap(buf, shape, dtype=float32) -> Tensor:
    return Tensor(buf, shape, dtype)


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of `data` (list, number, numpy array or Tensor)."""
    if isinstance(data, Tensor):
        data = data.numpy()
    arr = np.asarray(data)
    if dtype is None:
        dtype = int32 if arr.dtype.kind in "iub" else float32
    dtype = _normalize_dtype(dtype)
    if arr.dtype.kind not in "iubf":
        raise ValueError(f"tensor: cannot make a tensor from data of dtype {arr.dtype}")
    if dtype == int32 and arr.size and (arr.max() > 2**31 - 1 or arr.min() < -2**31):
        raise ValueError("tensor: integer values out of the int32 range")
    host = np.array(arr, dtype=_NP_DTYPE[dtype], order="C")  # a copy; ascontiguousarray would make 0-d 1-d
    t = Tensor(gpu().upload(host.reshape(-1), _BUF_DTYPE[dtype]), host.shape, dtype)
    t._host = host
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(arr) -> Tensor:
    return tensor(arr)


def full(shape, fill_value, dtype=None, requires_grad: bool = False) -> Tensor:
    shape = _as_shape("full", shape if isinstance(shape, (tuple, list)) else (shape,))
    dtype = _normalize_dtype(dtype)
    dev = gpu()
    if dtype == float32:
        buf = dev.unary("fill", dev.empty(numel(shape)), float(fill_value))
    else:
        buf = dev.upload(np.full(numel(shape), fill_value, np.int32))
    return Tensor(buf, shape, dtype, requires_grad)


def zeros(*shape, dtype=None, requires_grad: bool = False) -> Tensor:
    shape = _as_shape("zeros", shape)
    dtype = _normalize_dtype(dtype)
    return Tensor(gpu().alloc(numel(shape), _BUF_DTYPE[dtype]), shape, dtype, requires_grad)


def ones(*shape, dtype=None, requires_grad: bool = False) -> Tensor:
    return full(_as_shape("ones", shape), 1.0 if _normalize_dtype(dtype) == float32 else 1,
                dtype=dtype, requires_grad=requires_grad)


def zeros_like(t: Tensor, dtype=None) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype)


def ones_like(t: Tensor, dtype=None) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype)


def full_like(t: Tensor, fill_value, dtype=None) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype)


def arange(start, end=None, step=1, dtype=None) -> Tensor:
    if end is None:
        start, end = 0, start
    values = np.arange(start, end, step)
    if dtype is None:
        dtype = int32 if all(isinstance(v, (int, np.integer)) for v in (start, end, step)) else float32
    return tensor(values, dtype=dtype)


def rand(*shape, requires_grad: bool = False) -> Tensor:
    shape = _as_shape("rand", shape)
    return tensor(_rng[0].random(shape, dtype=np.float32), requires_grad=requires_grad)


def randn(*shape, requires_grad: bool = False) -> Tensor:
    shape = _as_shape("randn", shape)
    return tensor(_rng[0].standard_normal(shape, dtype=np.float32), requires_grad=requires_grad)


def randint(low, high=None, size=(1,)) -> Tensor:
    if high is None:
        low, high = 0, low
    return tensor(_rng[0].integers(low, high, size=size), dtype=int32)


def _to_tensor(value, like: Tensor | None = None) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (int, float, bool, np.number)):
        t = full((), float(value))
        return t
    return tensor(value)


# ===================================================================== recording

def _view_host(source: Tensor, host):
    """The host copy a view of `source` (sharing its buffer) may keep: integer tensors'
    only (index checks read it). Float buffers are updated in place (optimizers, running
    statistics), which would leave a view's copy stale."""
    return host if source.dtype == int32 else None


def _record(name: str, out: Tensor, parents: Sequence[Tensor], backward) -> Tensor:
    """Attach the backward rule of the op that produced `out` (when grad is wanted)."""
    if is_grad_enabled() and any(p.requires_grad for p in parents):
        out.requires_grad = True
        out._parents = tuple(parents)
        out._entry = Entry(name, tuple(id(p) for p in parents), id(out), backward)
    return out


def _topological_order(root: Tensor) -> list[Tensor]:
    """Every tensor behind `root` that has an entry, inputs before outputs."""
    order, seen = [], set()
    stack = [(root, False)]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.append(t)
            continue
        if id(t) in seen or t._entry is None:
            continue
        seen.add(id(t))
        stack.append((t, True))
        for p in t._parents:
            if p._entry is not None and id(p) not in seen:
                stack.append((p, False))
    return order


def _check_float(op: str, *tensors: Tensor) -> None:
    for t in tensors:
        if t.dtype != float32 and t.requires_grad:
            raise ValueError(f"{op}: integer tensors cannot require grad")


def sum_dims(buf, shape, dims):
    """Sum a contiguous buffer of `shape` over `dims` (kept as size 1); see ops.nd.sum_dims."""
    return gpu().sum_dims(buf, shape, dims)


def sum_to_shape(grad_buf, grad_shape, shape):
    """Sum a broadcast gradient back down to `shape` (the inverse of broadcasting)."""
    return gpu().sum_to_shape(grad_buf, grad_shape, shape)


def _float_operand(t: Tensor):
    return t._buf if t.dtype == float32 else gpu().cast(t._buf, "f32")


def _is_scalar(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, np.bool_)


def _binary(name: str, a, b) -> Tensor:
    if name in _SCALAR_OPS and isinstance(a, Tensor) and _is_scalar(b):
        return _scalar_binary(name, a, float(b), reverse=False)
    if name in _SCALAR_OPS and isinstance(b, Tensor) and _is_scalar(a):
        return _scalar_binary(name, b, float(a), reverse=True)
    a = _to_tensor(a)
    b = _to_tensor(b)
    dev = gpu()
    a_buf, b_buf = _float_operand(a), _float_operand(b)  # the backward reads these, never int bits
    buf, shape = dev.broadcast_binary(name, a_buf, a.shape, b_buf, b.shape)
    out = Tensor(buf, shape)

    needs = (a.requires_grad, b.requires_grad)
    backward = rule(name, dev, a_buf, b_buf, buf, shapes=(a.shape, b.shape, shape), needs=needs)
    return _record(name, out, (a, b), backward)


# Tensor-with-Python-scalar arithmetic as one unary launch: name -> (forward op, reversed op).
_SCALAR_OPS = {"add": ("add_scalar", "add_scalar"), "sub": ("add_scalar", "rsub_scalar"),
               "mul": ("scale", "scale"), "div": ("div_scalar", "rdiv_scalar"), "pow": ("pow_scalar", None)}


def _scalar_binary(name: str, x: Tensor, s: float, reverse: bool) -> Tensor:
    """x op s (or s op x when reverse) for a Python number s, with its backward."""
    op = _SCALAR_OPS[name][1 if reverse else 0]
    if op is None:  # s ** x: through the broadcasting kernel
        return _binary(name, full((), s), x)
    dev = gpu()
    xb = _float_operand(x)
    alpha = -s if (name, reverse) == ("sub", False) else s
    out = Tensor(dev.unary(op, xb, alpha), x.shape)

    backward = rule(op, dev, xb, out._buf, alpha)
    return _record(name, out, (x,), backward)


def _compare(name: str, a, b) -> Tensor:
    a = _to_tensor(a)
    b = _to_tensor(b)
    buf, shape = gpu().broadcast_binary(name, _float_operand(a), a.shape, _float_operand(b), b.shape)
    return Tensor(buf, shape)  # a 0/1 float mask; never differentiable




def _unary(name: str, x: Tensor, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    dev = gpu()
    xb = _float_operand(x)
    out = Tensor(dev.unary(name, xb, alpha, beta), x.shape)
    return _record(name, out, (x,), rule(name, dev, xb, out._buf, alpha, beta))


def unary_op(name: str, x: Tensor, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    """Apply a recorded unary op by name (relu, sigmoid, tanh_act, swish, gelu, exp, ...)."""
    return _unary(name, x, alpha, beta)


# ===================================================================== reductions

def _dims(op: str, dim, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    dims = tuple(sorted({_dim(op, d, ndim) for d in dim}))
    return dims


def _reduce_sum(x: Tensor, dim, keepdim: bool) -> Tensor:
    dev = gpu()
    dims = _dims("sum", dim, x.ndim)
    kept = tuple(1 if d in dims else size for d, size in enumerate(x.shape))
    buf = sum_dims(_float_operand(x), x.shape, dims) if x.numel() else dev.alloc(numel(kept))
    out_shape = kept if keepdim else tuple(s for i, s in enumerate(x.shape) if i not in dims)
    if not dims and x.ndim == 0:
        out_shape = ()
    out = Tensor(buf if buf is not x._buf else dev.copy(buf), out_shape)

    return _record("sum", out, (x,), rule("sum", dev, x.shape, kept))


def _reduce_extreme(op: str, x: Tensor, dim, keepdim: bool):
    """max/min: over everything (a 0-d tensor) or over one dim -> (values, indices)."""
    dev = gpu()
    if dim is None:  # a 0-d result whose gradient is shared evenly among tied extremes, as in torch
        if x.numel() == 0:
            raise ValueError(f"{op}: cannot reduce an empty tensor of shape {x.shape}")
        xb = _float_operand(x)
        value = Tensor(dev.reduce_axis(xb, 1, x.numel(), 1, op), ())

        return _record(op, value, (x,), rule(op + "_all", dev, xb, value._buf, x.shape))
    d = _dim(op, dim, x.ndim)
    outer, mid, inner = numel(x.shape[:d]), x.shape[d], numel(x.shape[d + 1:])
    if mid == 0:
        raise ValueError(f"{op}: cannot reduce over an empty dimension {d} of shape {x.shape}")
    xb = _float_operand(x)
    idx = dev.reduce_axis(xb, outer, mid, inner, "arg" + op)
    vals = dev.reduce_axis(xb, outer, mid, inner, op)
    kept = x.shape[:d] + (1,) + x.shape[d + 1:]
    out_shape = kept if keepdim else x.shape[:d] + x.shape[d + 1:]
    values = Tensor(vals, out_shape)
    indices = Tensor(idx, out_shape, int32)

    _record(op, values, (x,), rule(op + "_dim", dev, idx, outer, mid, inner))
    return MaxResult(values, indices)


def _arg_reduce(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    dev = gpu()
    if dim is None:
        out = dev.reduce_axis(_float_operand(x), 1, x.numel(), 1, op)
        return Tensor(out, (1,) * x.ndim if keepdim else (), int32)
    d = _dim(op, dim, x.ndim)
    out = dev.reduce_axis(_float_operand(x), numel(x.shape[:d]), x.shape[d], numel(x.shape[d + 1:]), op)
    shape = x.shape[:d] + ((1,) if keepdim else ()) + x.shape[d + 1:]
    return Tensor(out, shape, int32)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along dim: the fused row kernel over the last
    dim (another dim is moved last and back)."""
    d = _dim("softmax", dim, x.ndim)
    if x.numel() == 0:
        return x.float().clone()
    if x.ndim == 0:
        return softmax(x.reshape(1), 0).reshape(())
    if d != x.ndim - 1:
        return softmax(x.transpose(d, -1), -1).transpose(d, -1)
    dev = gpu()
    cols = x.shape[-1]
    rows = x.numel() // cols
    out = Tensor(dev.softmax(_float_operand(x), rows, cols), x.shape)
    return _record("softmax", out, (x,), rule("softmax", dev, out._buf, rows, cols))


def _max_detached(x: Tensor, d: int) -> Tensor:
    """x's max over dim d, kept as size 1, outside the graph (a shift that cancels out)."""
    out = gpu().reduce_axis(_float_operand(x), numel(x.shape[:d]), x.shape[d], numel(x.shape[d + 1:]), "max")
    return Tensor(out, x.shape[:d] + (1,) + x.shape[d + 1:])


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - max - log(sum(exp(x - max))) along dim (numerically stable)."""
    d = _dim("log_softmax", dim, x.ndim)
    if x.ndim == 0:
        return log_softmax(x.reshape(1), 0).reshape(())
    shifted = x - _max_detached(x, d)
    return shifted - shifted.exp().sum(d, keepdim=True).log()


def logsumexp(x: Tensor, dim, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over dim, computed around the max (numerically stable)."""
    d = _dim("logsumexp", dim, x.ndim)
    peak = _max_detached(x, d)
    out = (x - peak).exp().sum(d, keepdim=True).log() + peak
    return out if keepdim else out.squeeze(d)


# ===================================================================== shapes

def reshape(x: Tensor, shape) -> Tensor:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = numel(s for s in shape if s != -1)
        if known == 0 or x.numel() % known:
            raise ValueError(f"reshape: shape {shape} is invalid for input of size {x.numel()} (shape {x.shape})")
        shape = tuple(x.numel() // known if s == -1 else s for s in shape)
    if numel(shape) != x.numel() or any(s < 0 for s in shape):
        raise ValueError(f"reshape: shape {shape} is invalid for input of size {x.numel()} (shape {x.shape})")
    out = Tensor(x._buf, shape, x.dtype)
    out._host = _view_host(x, None if x._host is None else x._host.reshape(shape))
    return _record("reshape", out, (x,), rule("reshape", None))


def permute(x: Tensor, dims) -> Tensor:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(_dim("permute", d, x.ndim) for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"permute: dims {dims} are not a permutation of {x.ndim} dims")
    if dims == tuple(range(x.ndim)):
        return x
    dev = gpu()
    strides = contiguous_strides(x.shape)
    shape = tuple(x.shape[d] for d in dims)
    out = Tensor(dev.strided_gather(x._buf, shape, tuple(strides[d] for d in dims)), shape, x.dtype)
    return _record("permute", out, (x,), rule("permute", dev, x.shape, dims))


def expand(x: Tensor, shape) -> Tensor:
    pad = len(shape) - x.ndim
    if pad < 0:
        raise ValueError(f"expand: shape {tuple(shape)} has fewer dims than the tensor of shape {x.shape}")
    asked = tuple(shape)
    shape = tuple(x.shape[i - pad] if s == -1 and i >= pad else s for i, s in enumerate(asked))
    if any(s < 0 or (d >= pad and x.shape[d - pad] not in (1, s)) for d, s in enumerate(shape)):
        raise ValueError(f"expand: cannot expand shape {x.shape} to {asked}")
    dev = gpu()
    strides = [0] * pad + [0 if s == 1 else st for s, st in zip(x.shape, contiguous_strides(x.shape))]
    out = Tensor(dev.strided_gather(x._buf, shape, strides), shape, x.dtype)
    return _record("expand", out, (x,), rule("expand", dev, x.shape, shape))


def getitem(x: Tensor, index) -> Tensor:
    """Basic indexing: ints, slices (positive steps), None and Ellipsis."""
    if not isinstance(index, tuple):
        index = (index,)
    if any(isinstance(i, (Tensor, list, np.ndarray)) for i in index):
        raise ValueError("indexing: only ints, slices, None and ... are supported "
                         "(use index_select / gather for tensor indices)")
    n_ellipsis = sum(i is Ellipsis for i in index)
    if n_ellipsis > 1:
        raise IndexError("indexing: an index can only have a single ellipsis")
    n_real = sum(i is not None and i is not Ellipsis for i in index)
    if n_real > x.ndim:
        raise IndexError(f"indexing: too many indices for a tensor of {x.ndim} dims")
    if n_ellipsis:
        pos = index.index(Ellipsis)
        index = index[:pos] + (slice(None),) * (x.ndim - n_real) + index[pos + 1:]
    else:
        index = index + (slice(None),) * (x.ndim - n_real)
    base = contiguous_strides(x.shape)
    offset, shape, strides, d = 0, [], [], 0
    for item in index:
        if item is None:
            shape.append(1)
            strides.append(0)
            continue
        size = x.shape[d]
        if isinstance(item, slice):
            start, stop, step = item.indices(size)
            if step <= 0:
                raise ValueError("indexing: step must be positive")
            length = max(0, -(-(stop - start) // step))
            offset += start * base[d] if length else 0
            shape.append(length)
            strides.append(base[d] * step)
        else:
            i = int(item)
            if not -size <= i < size:
                raise IndexError(f"indexing: index {i} is out of bounds for dimension {d} with size {size}")
            offset += (i % size) * base[d]
        d += 1
    shape = tuple(shape)
    dev = gpu()
    out = Tensor(dev.strided_gather(x._buf, shape, strides, offset), shape, x.dtype)

    return _record("getitem", out, (x,), rule("getitem", dev, x.numel(), shape, strides, offset))


def _index_tensor(op: str, index) -> Tensor:
    if not isinstance(index, Tensor):
        array = np.asarray(index)
        if array.dtype == np.bool_:
            raise ValueError(f"{op}: boolean-mask indexing is not supported (its size depends on the data); "
                             f"use where() or masked_fill()")
        index = tensor(array)
    if index.dtype != int32:
        raise ValueError(f"{op}: index must be an integer tensor, got {index.dtype}")
    return index


def _check_index_range(op: str, index: Tensor, size: int, dim: int) -> None:
    """Host-side bounds check (free where the index tensor keeps its host copy)."""
    if index._host is None or index._host.size == 0:
        return
    low, high = int(index._host.min()), int(index._host.max())
    if low < -size or high >= size:
        bad = low if low < -size else high
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
    _check_index_range("gather", index, x.shape[d], d)
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
    """The entries of x at positions `index` (1-D integers) along dim; negative wrap."""
    index = _index_tensor("index_select", index)
    d = _dim("index_select", dim, x.ndim)
    if index.ndim > 1:
        raise ValueError(f"index_select: index must be 0-D or 1-D, got shape {index.shape}")
    size = x.shape[d] if x.ndim else 1
    _check_index_range("index_select", index, size, d)
    dev = gpu()
    outer, inner = numel(x.shape[:d]), numel(x.shape[d + 1:])
    n_index = index.numel()
    shape = x.shape[:d] + (n_index,) + x.shape[d + 1:] if x.ndim else (n_index,)
    out = Tensor(dev.gather_axis(x._buf, index._buf, outer, size, n_index, inner), shape, x.dtype)

    return _record("index_select", out, (x,), rule("index_select", dev, index._buf, outer, size, n_index, inner))


def _triangle(x: Tensor, diagonal: int, lower: bool) -> Tensor:
    if x.ndim < 2:
        raise ValueError(f"{'tril' if lower else 'triu'}: expects at least 2 dims, got shape {x.shape}")
    rows, cols = x.shape[-2:]
    make = np.tril if lower else np.triu
    keep = tensor(make(np.ones((rows, cols), np.float32), int(diagonal)))
    return where(keep, x, 0.0)


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
        if t.dtype != first.dtype:
            raise ValueError(f"cat: dtypes {first.dtype} and {t.dtype} differ")
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


def where(condition, a, b) -> Tensor:
    """a where condition is nonzero, else b (broadcast together)."""
    condition, a, b = _to_tensor(condition), _to_tensor(a), _to_tensor(b)
    shape = broadcast_shapes("where", condition.shape, a.shape, b.shape)
    dev = gpu()
    cond_full = expand(_as_float(condition).detach(), shape)._buf
    a_full = expand(a.detach(), shape)._buf if a.shape != shape else _float_operand(a)
    b_full = expand(b.detach(), shape)._buf if b.shape != shape else _float_operand(b)
    out = Tensor(dev.where(cond_full, a_full, b_full), shape)

    return _record("where", out, (a, b),
                   rule("where", dev, cond_full, a.shape, b.shape, shape, needs=(a.requires_grad, b.requires_grad)))


def _as_float(t: Tensor) -> Tensor:
    return t if t.dtype == float32 else t.float()


# ===================================================================== matmul

def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul: 1-D/2-D/batched with broadcast batch dims."""
    a, b = _to_tensor(a), _to_tensor(b)
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: both arguments need at least 1 dimension")
    if a.ndim == 1 and b.ndim == 1:
        return matmul(a.unsqueeze(0), b.unsqueeze(-1)).reshape(())
    if a.ndim == 1:
        return matmul(a.unsqueeze(0), b).squeeze(-2)
    if b.ndim == 1:
        return matmul(a, b.unsqueeze(-1)).squeeze(-1)
    m, k = a.shape[-2:]
    k2, n = b.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: shapes {a.shape} and {b.shape} cannot be multiplied ({k} != {k2})")
    if 0 in a.shape or 0 in b.shape:  # empty products: an empty result, or zeros when k == 0
        out_shape = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2]) + (m, n)
        return zeros(out_shape) if numel(out_shape) else Tensor(gpu().empty(0), out_shape)
    dev = gpu()
    if b.ndim == 2:
        batch_shape = a.shape[:-2]
        rows = numel(batch_shape) * m
        out = Tensor(dev.matmul_strided(a._buf, b._buf, 1, rows, n, k), batch_shape + (m, n))

        return _record("matmul", out, (a, b),
                       rule("matmul", dev, a._buf, b._buf, rows, n, k, (a.requires_grad, b.requires_grad)))
    batch_shape = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    a_full = a if a.shape[:-2] == batch_shape else expand(a, batch_shape + (m, k))
    b_full = b if b.shape[:-2] == batch_shape else expand(b, batch_shape + (k, n))
    batch = numel(batch_shape)
    out = Tensor(dev.matmul_strided(a_full._buf, b_full._buf, batch, m, n, k), batch_shape + (m, n))

    return _record("bmm", out, (a_full, b_full), rule("bmm", dev, a_full._buf, b_full._buf, batch, m, n, k,
                                                       (a_full.requires_grad, b_full.requires_grad)))
