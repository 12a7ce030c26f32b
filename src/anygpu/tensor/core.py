"""The Tensor class: its buffer, shape and dtype, its methods (each a thin call into the
module that holds the op), and backward."""

from __future__ import annotations

import copy
import math
from collections import namedtuple

import numpy as np

from .. import dtypes, placement
from ..autograd.engine import Entry, reverse_walk
from ..autograd.rules import backward as rule
from ..dtypes import bfloat16, float16, float32, int32, int64, to_dtype
from ..ops import gpu
from ..ops.intmath import raise_if_overflowed
from ..ops.nd import broadcast_shapes, numel

from .grad_mode import _ANOMALY, _nan_check, is_grad_enabled, no_grad
from .rng import _generator_rng


bool_ = dtypes.bool

long = int64

half = float16

_BUF_DTYPE = {d: d.storage for d in dtypes.ALL}  # Tensor dtype -> Buffer dtype

_NP_DTYPE = {float32: np.float32, float16: np.float16, int32: np.int32, int64: np.int32,
             bool_: np.float32, dtypes.float64: np.float64}  # as stored


# Called as hook(leaves) after every backward has written the leaves' .grad (DistributedDataParallel
# averages the gradients across processes there).
post_backward_hooks: list = []


# Called as hook(leaf) during backward as soon as the leaf's .grad is final for this backward
# (every op that reads it has been differentiated), while the rest is still being recorded
# (DistributedDataParallel starts reducing a bucket there). Costs nothing while empty.
grad_ready_hooks: list = []

MaxResult = namedtuple("MaxResult", ["values", "indices"])


def _normalize_dtype(dtype, op: str = "tensor", default=None) -> dtypes.dtype:
    result = to_dtype(dtype, op, default)
    if result is float16:
        _check_half(op)
    return result


def _check_half(op: str) -> None:
    """float16 tensors live in f16 Buffers, which need the adapter feature 'shader-f16'."""
    if not gpu().supports("f16"):
        raise ValueError(f"{op}: float16 tensors need the adapter feature 'shader-f16', which this adapter "
                         "lacks (use float32)")


def _is_int(dt) -> bool:
    """An integer dtype (int32/int64): stored as i32, exact integer arithmetic."""
    return dt is int32 or dt is int64


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


class RemovableHandle:
    """What `Tensor.register_hook` returns (torch.utils.hooks.RemovableHandle's use):
    `remove()` takes the hook away; also a context manager that removes it on exit."""

    _next_id = 0

    def __init__(self, hooks: dict):
        self._hooks = hooks
        self.id = RemovableHandle._next_id
        RemovableHandle._next_id += 1

    def remove(self) -> None:
        self._hooks.pop(self.id, None)

    def __enter__(self) -> "RemovableHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class Tensor:
    """A GPU array with autograd. Build with `anygpu.tensor`, `zeros`, `randn`, ..."""

    __slots__ = ("_buf", "shape", "dtype", "requires_grad", "grad", "_entry", "_parents",
                 "_host", "_retain", "_key", "_base", "_view", "_version", "_hooks", "__weakref__")
    # _host: the host array an integer tensor was made from, kept only so index checks
    # (class indices, embedding ids) can run before GPU work. Never used for reads:
    # in-place updates of a shared buffer would leave it stale.
    # _base: None, or for a view the tensor (never itself a view) whose buffer holds its
    # elements; _view: None (the whole buffer, row-major) or, on a StridedView, its
    # (strides, offset) in elements of the base's buffer (tensor/views.py).
    # _version: torch's version counter, bumped by every in-place op on the tensor or on
    # one of its views (kept on the base); a saved tensor found changed fails backward.
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, buf, shape, dtype: str = float32, requires_grad: bool = False):
        self._buf = buf
        self.shape = tuple(shape)
        # A float kernel's result keeps its input's storage: f16 Buffers are float16 tensors.
        if dtype is float32:
            stored = getattr(buf, "dtype", None)
            if stored == "f16":
                dtype = float16
            elif stored == "f64":  # a float64 op's result (runtime/host.py)
                dtype = dtypes.float64
        self.dtype = dtype
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self._entry: Entry | None = None
        self._parents: tuple = ()
        self._host = None
        self._retain = False
        self._hooks: dict | None = None  # register_hook: handle id -> hook, in order
        self._key = id(self)  # the autograd engine's name for this value (a new one after an in-place op)
        self._base = None
        self._view = None
        self._version = 0

    __hash__ = object.__hash__

    def __deepcopy__(self, memo):
        """copy.deepcopy (e.g. ``copy.deepcopy(model.state_dict())``): a tensor with its own
        copy of the data (GPU to GPU), the same shape, dtype and requires_grad, and a copy of
        .grad. As in torch, only graph leaves can be deep-copied."""
        if not self.is_leaf:
            raise RuntimeError("deepcopy: only tensors created explicitly (graph leaves) can be deep-copied; "
                               "copy t.detach() instead")
        new = Tensor(self._dev.copy(self._buf), self.shape, self.dtype, self.requires_grad)
        memo[id(self)] = new
        if self._host is not None:
            new._host = self._host.copy()
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        return new

    def __reduce_ex__(self, protocol):
        raise TypeError("anygpu tensors are not pickled (their data lives on the GPU, and anygpu never "
                        "unpickles): save them with anygpu.save or copy them with copy.deepcopy")

    # ------------------------------------------------------------- basics
    @property
    def device(self):
        """torch's `device` of the adapter holding the data, e.g. device(type='cuda', index=0)."""
        return placement.device_of(self._buf._dev)

    @property
    def _dev(self):
        """The runtime Device holding this tensor's buffer (what internal code launches on)."""
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
        """A host copy with this tensor's shape (float32, float16, float64, int32, int64 or bool)."""
        raise_if_overflowed(self._dev)  # an int64 result that passed 32 bits stops here, not wrapped
        stored = self._dev.read(self._buf).reshape(self.shape)
        if self.dtype is bool_:
            return stored != 0
        return stored.astype(np.int64) if self.dtype is int64 else stored

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        if self.numel() != 1:
            raise ValueError(f"item: only one-element tensors can be converted, this one has shape {self.shape}")
        value = self.numpy().reshape(-1)[0]
        if self.dtype is bool_:
            return bool(value)
        return float(value) if self.dtype.is_floating_point else int(value)

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self.numel() != 1:
            raise ValueError("the truth value of a tensor with more than one element is ambiguous")
        return bool(self.item())

    def __index__(self):
        if not _is_int(self.dtype) and self.dtype is not bool_:
            raise TypeError(f"only integer tensors of a single element can be converted to an index, "
                            f"got dtype {self.dtype}")
        return int(self.item())

    def __format__(self, spec: str) -> str:
        """f"{loss:.4f}" formats a 0-d tensor's value; other shapes accept no spec (as torch)."""
        if self.ndim == 0:
            return format(self.item(), spec)
        if spec:
            raise TypeError(f"unsupported format string passed to Tensor.__format__ (tensor of shape {self.shape})")
        return repr(self)

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __repr__(self) -> str:
        body = np.array2string(self.numpy(), precision=4, separator=", ", prefix="tensor(")
        extra = ""
        if self.dtype is not dtypes.default_float() and self.dtype is not int64 and self.dtype is not bool_:
            extra += f", dtype={self.dtype}"  # torch shows only non-default dtypes
        if self.dtype is bool_ and self.numel() == 0:
            extra += f", dtype={self.dtype}"
        if self._entry is not None:
            extra += f", grad_fn=<{self._entry.name}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    def detach(self) -> "Tensor":
        """The same data, cut from the graph: a view (in-place ops on either show in both)."""
        return detached(self)

    def requires_grad_(self, flag: bool = True) -> "Tensor":
        if flag and not self.dtype.is_floating_point:
            raise ValueError(f"requires_grad: only float tensors can require gradients, got dtype {self.dtype}")
        self.requires_grad = flag
        return self

    def retain_grad(self) -> None:
        self._retain = True

    def register_hook(self, hook) -> "RemovableHandle":
        """torch's Tensor.register_hook: hook(grad) is called with this tensor's gradient
        during backward, once it is complete and before it is used (before it goes into
        `.grad` for a leaf); a Tensor it returns replaces the gradient. Returns a handle
        whose `remove()` takes the hook away."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        if not callable(hook):
            raise TypeError(f"register_hook: expected a callable, got {type(hook).__name__}")
        if self._hooks is None:
            self._hooks = {}
        handle = RemovableHandle(self._hooks)
        self._hooks[handle.id] = hook
        return handle

    def clone(self) -> "Tensor":
        dev = self._dev
        buf = self._buf if self._view is not None else dev.copy(self._buf)  # a strided view gathers a copy
        return _record("clone", Tensor(buf, self.shape, self.dtype), (self,), rule("clone", dev))

    def contiguous(self, memory_format=None) -> "Tensor":
        """self where its elements are row-major already (torch's is_contiguous), else a copy."""
        if self._view is None or is_row_major(self.shape, self._view[0]):
            return self
        return _record("contiguous", Tensor(self._buf, self.shape, self.dtype), (self,), rule("reshape", None))

    def float(self) -> "Tensor":
        return self.to(float32)

    def long(self) -> "Tensor":
        return self.to(int64)

    def int(self) -> "Tensor":
        return self.to(int32)

    def bool(self) -> "Tensor":
        return self.to(bool_)

    def half(self) -> "Tensor":
        return self.to(float16)

    def bfloat16(self) -> "Tensor":
        return self.to(bfloat16)

    def double(self) -> "Tensor":
        return self.to(dtypes.float64)

    def type_as(self, other: "Tensor") -> "Tensor":
        return self.to(other.dtype)

    def to(self, dtype_or_device=None, dtype=None, non_blocking: bool = False, copy: bool = False, *,
           device=None, memory_format=None) -> "Tensor":
        """Convert dtype (`x.to(torch.long)`, `x.to(other)`, `x.to(device, dtype)`); a device
        argument is checked (placement.py: every device is the process's adapter) and kept."""
        if isinstance(dtype_or_device, Tensor):
            dtype = dtype_or_device.dtype
        elif isinstance(dtype_or_device, (dtypes.dtype, type, np.dtype)):
            dtype = dtype_or_device
        elif isinstance(dtype_or_device, str) and dtype_or_device.removeprefix("torch.") in (
                "float32", "float", "int32", "int64", "long", "int", "bool", "float16", "half", "bfloat16",
                "float64", "double"):
            dtype = dtype_or_device
        elif dtype_or_device is not None:
            placement.check_device("to", dtype_or_device)
        placement.check_device("to", device)
        if dtype is None:
            return self.clone() if copy else self
        return _cast(self, _normalize_dtype(dtype, "to"), copy)

    def cuda(self, device=None, non_blocking: bool = False) -> "Tensor":
        """The tensor itself: it already lives on the adapter (see anygpu/placement.py)."""
        placement.check_device("cuda", "cuda" if device is None else device)
        return self

    def cpu(self) -> "Tensor":
        """The tensor itself: anygpu keeps tensors on the adapter; `.numpy()` reads back."""
        return self

    # ------------------------------------------------------------- autograd
    def backward(self, gradient: "Tensor | None" = None, retain_graph: bool | None = None,
                 create_graph: bool = False, inputs=None) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's `.grad` that requires grad; the graph
        is freed unless retain_graph=True (higher-order gradients are not supported)."""
        if create_graph:
            raise ValueError("backward: create_graph=True (higher-order gradients) is not supported by anygpu")
        if inputs is not None:
            raise ValueError("backward: inputs= is not supported; use torch.autograd.grad(outputs, inputs)")
        if not self.requires_grad:
            raise RuntimeError("backward: tensor does not require grad and has no grad_fn")
        dev = self._dev
        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, "
                                   f"got shape {self.shape}")
            seed = dev.upload(np.ones(1, _NP_DTYPE[self.dtype]), _BUF_DTYPE[self.dtype])
        else:
            gradient = _to_tensor(gradient, like=self)
            if gradient.shape != self.shape:
                raise ValueError(f"backward: gradient has shape {gradient.shape}, expected {self.shape}")
            seed = gradient._buf if gradient._buf.dtype == self._buf.dtype else dev.cast(gradient._buf, self._buf.dtype)
        order = _topological_order(self)
        leaves = {}
        wanted = set()
        for t in order:
            for p in t._parents:
                if p.requires_grad:
                    wanted.add(p._key)
                    if p._entry is None or p._retain:
                        leaves[p._key] = p
        if self._entry is None or self._retain:
            leaves[self._key] = self
        grads = {self._key: seed}
        entries = [t._entry for t in order]
        written: set = set()
        hooked = {t._key: t for t in (*order, *leaves.values()) if t._hooks}
        hooks_run: set = set()

        def run_hooks(key, grad):
            t = hooked.get(key)
            if t is None or key in hooks_run:
                return grad
            hooks_run.add(key)
            value = Tensor(grad, t.shape, t.dtype)
            with no_grad():
                for hook in tuple(t._hooks.values()):
                    replaced = hook(value)
                    if replaced is not None:
                        if not isinstance(replaced, Tensor) or replaced.shape != t.shape:
                            got = tuple(replaced.shape) if isinstance(replaced, Tensor) else type(replaced).__name__
                            raise RuntimeError(f"hook: the gradient it returns must be a Tensor of shape {t.shape}, "
                                               f"got {got}")
                        value = replaced
            return value._buf if value._buf.dtype == grad.dtype else dev.cast(value._buf, grad.dtype)

        def write_grad(key) -> None:
            grad = grads.get(key)
            if grad is None:
                return
            if hooked:
                grad = grads[key] = run_hooks(key, grad)
            written.add(key)
            leaf = leaves[key]
            if grad.dtype != leaf._buf.dtype:  # gradients come in the tensor's dtype, as torch's
                grad = dev.cast(grad, leaf._buf.dtype)
            if leaf.grad is None:
                leaf.grad = Tensor(grad, leaf.shape, leaf.dtype)
            else:
                leaf.grad.add_(Tensor(grad, leaf.shape, leaf.dtype))  # in place, as torch's AccumulateGrad

        done = None
        if grad_ready_hooks:  # a leaf is complete once the walk passes the first entry reading it
            complete_at: dict = {}
            for position in range(len(entries) - 1, -1, -1):
                for key in entries[position].inputs:
                    if key in leaves:
                        complete_at[key] = position
            finished: dict = {}
            for key, position in complete_at.items():
                finished.setdefault(position, []).append(key)

            def done(position: int) -> None:
                for key in finished.get(position, ()):
                    write_grad(key)
                    if key in written:
                        for hook in tuple(grad_ready_hooks):
                            hook(leaves[key])
        reverse_walk(entries, grads, dev.add, wants_grad=wanted.__contains__, keep=lambda key: key in leaves,
                     done=done, transform=run_hooks if hooked else None,
                     check=_nan_check(dev) if _ANOMALY["enabled"] and _ANOMALY["check_nan"] else None)
        for key in leaves:
            if key not in written:
                write_grad(key)
        for t in order if not retain_graph else ():  # free the graph, as torch does without retain_graph
            t._entry = _freed_entry(t._entry)
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

    def div(self, other, *, rounding_mode=None):
        """self / other; rounding_mode 'trunc' or 'floor' rounds the quotient (Tensor.divide)."""
        return self / other if rounding_mode is None else self.divide(other, rounding_mode=rounding_mode)

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
        return _unary("tanh", self)

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
        if isinstance(min, Tensor) or isinstance(max, Tensor):  # tensor bounds: elementwise
            out = self if min is None else _binary("maximum", self, min)
            return out if max is None else _binary("minimum", out, max)
        if min is None and max is None:
            raise ValueError("clamp: at least one of min and max must be given")
        if not self.dtype.is_floating_point and all(isinstance(v, (int, np.integer, type(None))) for v in (min, max)):
            return _unary("clamp", self, min, max)
        lo = -math.inf if min is None else float(min)
        hi = math.inf if max is None else float(max)
        return _unary("clamp", _as_float(self), lo, hi)

    clip = clamp

    # ------------------------------------------------------------- reductions
    def _scalar_dim(self, op: str, dim) -> bool:
        """Whether this is a 0-d tensor reduced over a dim: torch takes dim 0 or -1 (or a
        tuple of them) as the scalar itself, and the result stays 0-d with or without keepdim.
        The callers then reduce the 1-element vector over dim 0."""
        if self.ndim != 0 or dim is None or isinstance(dim, Tensor):
            return False
        _dims(op, dim, 0)  # IndexError for any other dim, as torch
        return True

    def sum(self, dim=None, keepdim: bool = False):
        if self._scalar_dim("sum", dim):
            return _reduce_sum(self.reshape(1), 0, False)
        return _reduce_sum(self, dim, keepdim)

    def mean(self, dim=None, keepdim: bool = False, dtype=None):
        if dtype is not None:
            return self.to(dtype).mean(dim, keepdim)
        if not self.dtype.is_floating_point:
            raise ValueError(f"mean: input dtype must be a float dtype, got {self.dtype} "
                             f"(use x.float().mean(), as torch requires)")
        if self._scalar_dim("mean", dim):
            return self.reshape(1).mean(0)
        total = _reduce_sum(self, dim, keepdim)
        if self.numel() == 0:  # a mean over nothing is NaN, as in torch
            return total * math.nan
        return total * (1.0 / (self.numel() // max(total.numel(), 1)))

    def max(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):  # torch.max(a, b): the elementwise maximum
            return self.maximum(dim)
        if self._scalar_dim("max", dim):
            return _reduce_extreme("max", self.reshape(1), 0, False)
        return _reduce_extreme("max", self, dim, keepdim)

    def min(self, dim=None, keepdim: bool = False):
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        if self._scalar_dim("min", dim):
            return _reduce_extreme("min", self.reshape(1), 0, False)
        return _reduce_extreme("min", self, dim, keepdim)

    def var(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        """Variance over dim (all dims by default), divided by n - correction
        (correction 1 unless unbiased=False or correction says otherwise), as torch."""
        if isinstance(dim, bool):  # x.var(False): the legacy unbiased argument
            dim, unbiased = None, dim
        if correction is None:
            correction = 0 if unbiased is False else 1
        if self._scalar_dim("var", dim):
            return self.reshape(1).var(0, correction=correction)
        scale, ratio, normalized, divisor = self._scaled_var(dim, keepdim, correction, parts=True)
        value = (ratio * scale * scale).detach()
        if not self.requires_grad or not is_grad_enabled():
            return value
        # torch's gradient, 2 (x - mean) / (n - correction) * grad, made directly: through
        # ratio * scale**2 it passes an overflowed inf (values near 1e30) and turns NaN.
        linear = (self * normalized.detach()).sum(dim, keepdim=keepdim)
        step = scale * (2.0 / divisor if divisor > 0 else math.nan)
        return value + (linear - linear.detach()) * step

    def _scaled_var(self, dim, keepdim: bool, correction, parts: bool = False):
        """(scale, ratio) with var = scale**2 * ratio: the deviations are divided by their
        largest magnitude (a constant for autograd) before squaring, so values near 1e30,
        whose squares overflow float32, still give a finite std. The mean is corrected once
        by the mean of the deviations (two-pass), so [1e30] * 3 has variance 0 as torch's.
        parts: also the normalized deviations and the divisor."""
        centered = self - self.mean(dim, keepdim=True)
        if self.numel():
            centered = centered - centered.mean(dim, keepdim=True)
        peak = centered.detach().abs()
        for d in sorted(_dims("var", dim, self.ndim), reverse=True):
            peak = peak.max(d, keepdim=True)[0] if peak.shape[d] else peak.sum(d, keepdim=True)
        peak = where(peak == 0.0, 1.0, peak)
        normalized = centered / peak
        total = (normalized * normalized).sum(dim, keepdim=keepdim)
        divisor = (self.numel() // max(total.numel(), 1) if self.numel() else 0) - correction
        scale, ratio = peak.reshape(total.shape), total * (1.0 / divisor if divisor > 0 else math.nan)
        return (scale, ratio, normalized, divisor) if parts else (scale, ratio)

    def std(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        if correction is None:
            correction = 0 if unbiased is False else 1
        if self._scalar_dim("std", dim):
            return self.reshape(1).std(0, correction=correction)
        scale, ratio, normalized, divisor = self._scaled_var(dim, keepdim, correction, parts=True)
        value = (ratio.sqrt() * scale).detach()
        if not self.requires_grad or not is_grad_enabled():
            return value
        # torch's gradient (x - mean) / ((n - correction) std) * grad, made directly, and 0 where
        # std is 0 (a constant row) as torch's: through sqrt it is 0 * inf = NaN there.
        linear = (self * normalized.detach()).sum(dim, keepdim=keepdim)
        constant = value == 0.0  # `where` masks their gradient whole, even an infinite one
        step = scale / (where(constant, 1.0, value) * divisor) if divisor > 0 else value * math.nan
        return value + where(constant, 0.0, (linear - linear.detach()) * step)

    def logsumexp(self, dim, keepdim: bool = False):
        if self._scalar_dim("logsumexp", dim):
            return logsumexp(self.reshape(1), 0, False)
        return logsumexp(self, dim, keepdim)

    def argmax(self, dim=None, keepdim: bool = False):
        if self._scalar_dim("argmax", dim):
            return _arg_reduce("argmax", self.reshape(1), 0, False)
        return _arg_reduce("argmax", self, dim, keepdim)

    def argmin(self, dim=None, keepdim: bool = False):
        if self._scalar_dim("argmin", dim):
            return _arg_reduce("argmin", self.reshape(1), 0, False)
        return _arg_reduce("argmin", self, dim, keepdim)

    def softmax(self, dim: int = -1):
        return softmax(self, dim)

    def log_softmax(self, dim: int = -1):
        return log_softmax(self, dim)

    # ------------------------------------------------------------- shapes
    def reshape(self, *shape):
        return reshape(self, shape)

    def view(self, *shape):
        return view(self, shape)

    def flatten(self, start_dim: int = 0, end_dim: int = -1):
        start, end = _dim("flatten", start_dim, self.ndim), _dim("flatten", end_dim, self.ndim)
        if self.ndim == 0:  # dims 0 / -1 only (checked above), as torch
            return reshape(self, (1,))
        if start > end:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} "
                             f"(for a tensor of {self.ndim} dims)")
        shape = self.shape[:start] + (numel(self.shape[start:end + 1]),) + self.shape[end + 1:]
        return reshape(self, shape)

    def unsqueeze(self, dim: int):
        return unsqueezed(self, _dim("unsqueeze", dim, self.ndim + 1))

    def squeeze(self, dim=None):
        if dim is None:
            return squeezed(self, {d for d, s in enumerate(self.shape) if s == 1})
        dims = dim if isinstance(dim, (tuple, list)) else (dim,)
        return squeezed(self, {d for d in (_dim("squeeze", k, self.ndim) for k in dims) if self.shape[d] == 1})

    def squeeze_(self, dim=None):
        """squeeze in place: this tensor takes the new shape (its elements stay where they are)."""
        return regeometry(self, self.squeeze(dim))

    def unsqueeze_(self, dim: int):
        """unsqueeze in place: this tensor takes the new shape (its elements stay where they are)."""
        return regeometry(self, self.unsqueeze(dim))

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
        if isinstance(index, list) and index and all(type(i) is int and i >= 0 for i in index):
            return index_select(self, 0, index)  # x[rows]: one gather along dim 0
        if isinstance(index, Tensor) and _is_int(index.dtype) and index.ndim == 1 and index._host is not None \
                and (index._host.size == 0 or index._host.min() >= 0):
            return index_select(self, 0, index)  # (negative rows take the general path, which wraps them)
        return getitem(self, index)

    def masked_fill(self, mask, value) -> "Tensor":
        """value where mask is nonzero, self elsewhere (mask broadcasts to self's shape)."""
        mask = _to_tensor(mask)
        if broadcast_shapes("masked_fill", self.shape, mask.shape) != self.shape:
            raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to {self.shape}")
        if isinstance(value, Tensor):
            if value.numel() != 1:
                raise ValueError(f"masked_fill: value must be a number or a 1-element tensor, got shape {value.shape}")
            value = value.reshape(())
            value = value if value.dtype is self.dtype else _cast(value, self.dtype)
        else:  # the result keeps self's dtype, as torch
            value = bool(value) if self.dtype is bool_ else int(value) if _is_int(self.dtype) else float(value)
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
        return multi_output_views(pieces, "split")

    def tril(self, diagonal: int = 0) -> "Tensor":
        return _triangle(self, diagonal, lower=True)

    def triu(self, diagonal: int = 0) -> "Tensor":
        return _triangle(self, diagonal, lower=False)

    # ------------------------------------------------------------- in-place ops and writes
    def __setitem__(self, index, value):
        setitem(self, index, value)

    def add_(self, other, alpha=1):
        return _inplace(self, self + (other if alpha == 1 else other * alpha), "add_")

    def sub_(self, other, alpha=1):
        return _inplace(self, self - (other if alpha == 1 else other * alpha), "sub_")

    def mul_(self, other):
        return _inplace(self, self * other, "mul_")

    def div_(self, other):
        return _inplace(self, self / other, "div_")

    def pow_(self, exponent):
        return _inplace(self, self ** exponent, "pow_")

    def neg_(self):
        return _inplace(self, -self, "neg_")

    def clamp_(self, min=None, max=None):
        return _inplace(self, self.clamp(min, max), "clamp_")

    clip_ = clamp_

    def masked_fill_(self, mask, value):
        return _inplace(self, self.masked_fill(mask, value), "masked_fill_")

    def copy_(self, src, non_blocking: bool = False):
        src = _to_tensor(src)
        if src.shape != self.shape:
            src = expand(src, self.shape)
        return _inplace(self, src if src.dtype is self.dtype else _cast(src, self.dtype), "copy_")

    def fill_(self, value):
        if isinstance(value, Tensor):
            return _inplace(self, expand(value.reshape(()), self.shape), "fill_")
        return _inplace(self, full(self.shape, value, dtype=self.dtype), "fill_")

    def zero_(self):
        return self.fill_(0)

    def uniform_(self, a: float = 0.0, b: float = 1.0, generator=None):
        values = _generator_rng(generator).uniform(a, b, self.shape)
        values = values if self.dtype is dtypes.float64 else values.astype(np.float32)
        return _inplace(self, tensor(values, dtype=self.dtype), "uniform_")

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator=None):
        values = _generator_rng(generator).normal(mean, std, self.shape)
        values = values if self.dtype is dtypes.float64 else values.astype(np.float32)
        return _inplace(self, tensor(values, dtype=self.dtype), "normal_")

    def random_(self, low: int = 0, high: int | None = None, generator=None):
        if high is None:
            low, high = 0, low if low else 2**24
        values = _generator_rng(generator).integers(low, high, self.shape)
        return _inplace(self, tensor(values, dtype=self.dtype), "random_")

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    @property
    def data(self) -> "Tensor":
        """The same values outside the graph: a view, whose in-place ops change this tensor
        without counting as its in-place ops (torch's .data does not share the version counter)."""
        return untracked(detached(self))

    @data.setter
    def data(self, value: "Tensor") -> None:
        if not isinstance(value, Tensor):
            raise ValueError(f"data: expected a Tensor, got {type(value).__name__}")
        # self now shares value's storage: a strided view of value's base, or value's buffer itself
        if value._view is not None:
            self.__class__ = StridedView
            self._base, self._view = value._base, value._view
        else:
            if self._view is not None:
                self.__class__ = Tensor
            self._base, self._view = value._base, None  # (None when value owns its buffer: both hold it)
            self._buf = value._buf
        self.shape, self.dtype, self._host = value.shape, value.dtype, value._host

    # ------------------------------------------------------------- torch's other Tensor methods
    def __floordiv__(self, other):
        return _binary("floordiv", self, other)

    def __rfloordiv__(self, other):
        return _binary("floordiv", other, self)

    def __mod__(self, other):
        return _binary("remainder", self, other)

    def __rmod__(self, other):
        return _binary("remainder", other, self)

    def __invert__(self):
        if self.dtype is bool_:
            return _compare("eq", self, False)
        if _is_int(self.dtype):
            return _int_binary("sub", -1, self, self.dtype)
        raise ValueError(f"~ (bitwise not): only bool and integer tensors, got {self.dtype}")

    def _logical(self, other, name: str):
        other = _to_tensor(other)
        if self.dtype.is_floating_point or other.dtype.is_floating_point:
            raise ValueError(f"{name}: only bool and integer tensors, got {self.dtype} and {other.dtype}")
        return _int_binary(name, self, other, _result_dtype(self, other))

    def __and__(self, other):
        return self._logical(other, "bitwise_and")

    __rand__ = __and__

    def __or__(self, other):
        return self._logical(other, "bitwise_or")

    __ror__ = __or__

    def __xor__(self, other):
        return self._logical(other, "bitwise_xor")

    __rxor__ = __xor__

    def eq(self, other):
        return _compare("eq", self, other)

    def ne(self, other):
        return _compare("ne", self, other)

    def lt(self, other):
        return _compare("lt", self, other)

    def le(self, other):
        return _compare("le", self, other)

    def gt(self, other):
        return _compare("gt", self, other)

    def ge(self, other):
        return _compare("ge", self, other)

    def equal(self, other) -> bool:
        return self.shape == other.shape and bool(_compare("eq", self, other).all())

    def logical_not(self):
        return _compare("eq", self, 0)

    def logical_and(self, other):
        return _cast(self, bool_) & _cast(_to_tensor(other), bool_)

    def logical_or(self, other):
        return _cast(self, bool_) | _cast(_to_tensor(other), bool_)

    def logical_xor(self, other):
        return _cast(self, bool_) ^ _cast(_to_tensor(other), bool_)

    def all(self, dim=None, keepdim: bool = False):
        return _compare("eq", _reduce_sum(_compare("eq", self, 0), dim, keepdim), 0)

    def any(self, dim=None, keepdim: bool = False):
        return _compare("ne", _reduce_sum(_compare("ne", self, 0), dim, keepdim), 0)

    def isnan(self):
        return _compare("ne", self, self) if self.dtype.is_floating_point else zeros_like(self, dtype=bool_)

    def isinf(self):
        return _compare("eq", self.abs(), math.inf) if self.dtype.is_floating_point else zeros_like(self, dtype=bool_)

    def isfinite(self):
        return ~(self.isnan() | self.isinf())

    def floor_divide(self, other):
        return _binary("floordiv", self, other)

    def remainder(self, other):
        return _binary("remainder", self, other)

    def fmod(self, other):  # sign of the dividend: a - trunc(a / b) * b
        if not _result_dtype(self, other).is_floating_point:
            rem = _binary("remainder", self, other)
            fix = _compare("ne", rem, 0) & _compare("ne", _compare("lt", rem, 0), _compare("lt", self, 0))
            return _binary("sub", rem, _binary("mul", _cast(fix, int64), other))
        return self - _unary("trunc", self / other) * other

    def floor(self):
        return _unary("floor", self) if self.dtype.is_floating_point else self.clone()

    def ceil(self):
        return _unary("ceil", self) if self.dtype.is_floating_point else self.clone()

    def round(self, decimals: int = 0):
        if not self.dtype.is_floating_point:
            return self.clone()
        if decimals:
            return _unary("round", self * 10.0 ** decimals) / 10.0 ** decimals
        return _unary("round", self)

    def trunc(self):
        return _unary("trunc", self) if self.dtype.is_floating_point else self.clone()

    def sign(self):
        if not self.dtype.is_floating_point:
            return _int_binary("sub", _cast(_compare("gt", self, 0), int64), _cast(_compare("lt", self, 0), int64),
                               self.dtype)
        return _unary("sign", self)

    def log2(self):
        return self.log() * (1.0 / math.log(2.0))

    def log10(self):
        return self.log() * (1.0 / math.log(10.0))

    def log1p(self):
        return _unary("log1p", self)

    def expm1(self):
        return self.exp() - 1.0

    def mm(self, other):
        if self.ndim != 2 or _to_tensor(other).ndim != 2:
            raise ValueError(f"mm: expects two 2-D tensors, got shapes {self.shape} and {_to_tensor(other).shape}")
        return matmul(self, other)

    def bmm(self, other):
        other = _to_tensor(other)
        if self.ndim != 3 or other.ndim != 3 or self.shape[0] != other.shape[0]:
            raise ValueError(f"bmm: expects two 3-D tensors with the same batch, got shapes {self.shape} and {other.shape}")
        return matmul(self, other)

    def dot(self, other):
        if self.ndim != 1 or _to_tensor(other).ndim != 1:
            raise ValueError(f"dot: expects two 1-D tensors, got shapes {self.shape} and {_to_tensor(other).shape}")
        return matmul(self, other)

    def outer(self, other):
        return self.reshape(-1, 1) * _to_tensor(other).reshape(1, -1)

    def view_as(self, other):
        return reshape(self, other.shape)

    def reshape_as(self, other):
        return reshape(self, other.shape)

    def expand_as(self, other):
        return expand(self, other.shape)

    def nelement(self) -> int:
        return self.numel()

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def is_cuda(self) -> bool:
        return True  # every tensor lives on the adapter (see anygpu/placement.py)

    def get_device(self) -> int:
        """The index of the adapter holding the data (torch: the CUDA device index)."""
        return self.device.index

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_contiguous(self, memory_format=None) -> bool:
        return self._view is None or is_row_major(self.shape, self._view[0])

    def storage_offset(self) -> int:
        return 0 if self._view is None else self._view[1]

    def untyped_storage(self) -> "Storage":
        """The storage this tensor's elements live in (shared by a tensor and its views)."""
        return Storage(self if self._base is None else self._base)

    def data_ptr(self) -> int:
        """An address-like number: the storage's, plus this tensor's offset in bytes (equal
        for a tensor and a view of it at offset 0, as torch's)."""
        return self.untyped_storage().data_ptr() + self.storage_offset() * self.element_size()

    def new_tensor(self, data, dtype=None, device=None, requires_grad: bool = False):
        return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)

    # new_*: torch's keywords (size=, layout, pin_memory) go to the factories (tensor/outputs.py).
    def new_zeros(self, *size, dtype=None, device=None, requires_grad: bool = False, **keywords):
        return zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad, **keywords)

    def new_ones(self, *size, dtype=None, device=None, requires_grad: bool = False, **keywords):
        return ones(*size, dtype=dtype or self.dtype, requires_grad=requires_grad, **keywords)

    def new_empty(self, *size, dtype=None, device=None, requires_grad: bool = False, **keywords):
        if fills_uninitialized_memory():  # torch's fill (tensor/determinism.py), else zeros
            return uninitialized(_as_shape("new_empty", size), dtype or self.dtype, requires_grad)
        return zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad, **keywords)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad: bool = False, **keywords):
        return full(size, fill_value, dtype=dtype or self.dtype, requires_grad=requires_grad, **keywords)

    def narrow(self, dim: int, start: int, length: int):
        d = _dim("narrow", dim, self.ndim)
        return getitem(self, (slice(None),) * d + (slice(start, start + length),))

    def unbind(self, dim: int = 0):
        d = _dim("unbind", dim, self.ndim)
        return multi_output_views([getitem(self, (slice(None),) * d + (i,)) for i in range(self.shape[d])], "unbind")

    def repeat(self, *sizes):
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        if len(sizes) < self.ndim:
            raise ValueError(f"repeat: {len(sizes)} repeat counts for a tensor of {self.ndim} dims")
        x = self.reshape((1,) * (len(sizes) - self.ndim) + self.shape)
        paired = x.reshape(tuple(v for s in x.shape for v in (1, s)))
        grown = expand(paired, tuple(v for r, s in zip(sizes, x.shape) for v in (r, s)))
        return grown.reshape(tuple(r * s for r, s in zip(sizes, x.shape)))

    def flip(self, *dims):
        return flip(self, dims[0] if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims)

    def roll(self, shifts, dims=None):
        return roll(self, shifts, dims)

    def cumsum(self, dim: int, dtype=None):
        return cumsum(self, dim, dtype=dtype)

    def sort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        return sort(self, dim, descending)

    def argsort(self, dim: int = -1, descending: bool = False, stable: bool = False):
        return sort(self, dim, descending).indices

    def topk(self, k: int, dim: int = -1, largest: bool = True, sorted: bool = True):
        return topk(self, k, dim, largest, sorted)

    def multinomial(self, num_samples: int, replacement: bool = False, generator=None):
        return multinomial(self, num_samples, replacement, generator=generator)

    def nonzero(self, as_tuple: bool = False):
        return nonzero(self, as_tuple)

    def norm(self, p=2, dim=None, keepdim: bool = False):
        """torch's Tensor.norm: the p-norm of the elements (over dim), 'fro' the 2-norm; its
        gradient at a zero vector is zero, as torch's (linalg.vector_norm)."""
        if isinstance(p, str) and p != "fro":
            raise ValueError(f"norm: p must be a number or 'fro', got {p!r} (see anygpu.linalg.matrix_norm)")
        return vector_norm(self, 2 if p == "fro" else p, dim, keepdim)

    def amax(self, dim=None, keepdim: bool = False):
        if dim is None or isinstance(dim, (tuple, list)):
            dims = _dims("amax", dim, self.ndim)
            out = self
            for d in sorted(dims, reverse=True):
                out = out.max(d, keepdim=True).values
            return out if keepdim else out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in dims))
        return self.max(dim, keepdim).values

    def amin(self, dim=None, keepdim: bool = False):
        return -((-self).amax(dim, keepdim))

    def diag(self, diagonal: int = 0):
        return diag(self, diagonal)

    # ------------------------------------------------------------- more of torch's Tensor methods
    def scatter(self, dim: int, index, src=None, value=None, reduce=None):
        return scatter(self, dim, index, src if src is not None else value, add=False)

    def scatter_add(self, dim: int, index, src):
        return scatter(self, dim, index, src, add=True)

    def scatter_(self, dim: int, index, src=None, value=None, reduce=None):
        return _inplace(self, self.scatter(dim, index, src, value), "scatter_")

    def scatter_add_(self, dim: int, index, src):
        return _inplace(self, self.scatter_add(dim, index, src), "scatter_add_")

    def masked_select(self, mask):
        mask = _to_tensor(mask)
        shape = broadcast_shapes("masked_select", self.shape, mask.shape)
        x = self if self.shape == shape else expand(self, shape)
        return getitem(x, _cast(mask, bool_) if mask.shape == shape else expand(_cast(mask, bool_), shape))

    def prod(self, dim=None, keepdim: bool = False, dtype=None):
        return prod(self, dim, keepdim, dtype=dtype)

    def cumprod(self, dim: int, dtype=None):
        return cumprod(self, dim, dtype=dtype)

    def repeat_interleave(self, repeats, dim=None, output_size=None):
        return repeat_interleave(self, repeats, dim)

    def tile(self, *dims):
        dims = tuple(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) else dims
        return self.repeat((1,) * (self.ndim - len(dims)) + tuple(dims))

    def broadcast_to(self, *shape):
        return self.expand(*shape)

    def movedim(self, source, destination):
        return movedim(self, source, destination)

    moveaxis = movedim

    def swapaxes(self, axis0: int, axis1: int):
        return self.transpose(axis0, axis1)

    swapdims = swapaxes

    def select(self, dim: int, index: int):
        return getitem(self, (slice(None),) * _dim("select", dim, self.ndim) + (int(index),))

    def unflatten(self, dim: int, sizes):
        d = _dim("unflatten", dim, self.ndim)
        return reshape(self, self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    @property
    def mT(self):
        return self.transpose(-2, -1)

    def ndimension(self) -> int:
        return self.ndim

    def lerp(self, end, weight):
        return self + (_to_tensor(end) - self) * weight

    def lerp_(self, end, weight):
        return _inplace(self, self.lerp(end, weight), "lerp_")

    def addmm(self, mat1, mat2, *, beta=1, alpha=1):
        return _scaled_sum(self, matmul(mat1, mat2), beta, alpha)

    def baddbmm(self, batch1, batch2, *, beta=1, alpha=1):
        return _scaled_sum(self, matmul(batch1, batch2), beta, alpha)

    def count_nonzero(self, dim=None):
        return _compare("ne", self, 0).sum(dim)

    def tan(self):
        return self.sin() / self.cos()

    def atan(self):
        return _unary("atan", self)

    arctan = atan

    def asin(self):
        return _unary("asin", self)

    def acos(self):
        return _unary("acos", self)

    def erf(self):
        return _unary("erf", self)

    def lgamma(self):
        """log |Gamma(x)| (Lanczos, g = 7, n = 9; reflection below 1/2; within 3e-6 of max(|y|, 1)),
        0 at 1 and 2, +inf at the poles (0, -1, ...) and at +-inf, as torch; gradient digamma(x)."""
        return Lgamma.apply(self)

    def digamma(self):
        """Gamma'(x) / Gamma(x): shifted up by 6 (the recurrence), then the asymptotic series;
        reflection for x < 0; -inf at +0, +inf at -0, NaN at the negative integers, as torch.
        Differentiable (its gradient is the series' derivative: trigamma to float32 accuracy)."""
        x = self if self.dtype is float32 or self.dtype is dtypes.float64 else _cast(self, float32)
        out = _digamma_values(x)
        return out if self.dtype is not float16 else _cast(out, float16)

    def erfinv(self):
        """The inverse of erf on [-1, 1] (+-inf at +-1, NaN outside), from M. Giles' single-precision
        polynomials ("Approximating the erfinv function", GPU Computing Gems, 2011) in the
        elementwise ops; gradient sqrt(pi) / 2 * exp(erfinv(x)^2), as torch's."""
        return Erfinv.apply(self)

    def atan2(self, other):
        """The angle of (other, self) in (-pi, pi], as torch.atan2(self, other)."""
        # 2 atan(y / (r + x)): smooth everywhere but the negative x axis and the origin,
        # so its gradient is torch's x / r^2, -y / r^2 (no where() around a division by 0)
        other = _to_tensor(other)
        denominator = (self * self + other * other).sqrt() + other
        on_axis = denominator == 0
        angle = (self / where(on_axis, 1.0, denominator)).atan() * 2.0
        return where(on_axis, where(other < 0, math.pi, 0.0), angle)

    arctan2 = atan2

    def sinh(self):
        return (self.exp() - (-self).exp()) * 0.5

    def cosh(self):
        return (self.exp() + (-self).exp()) * 0.5

    def logit(self, eps=None):
        x = self if eps is None else self.clamp(eps, 1.0 - eps)
        return (x / (1.0 - x)).log()

    def frac(self):
        return self - self.trunc()

    def diff(self, n: int = 1, dim: int = -1):
        out = self
        d = _dim("diff", dim, self.ndim)
        for _ in range(n):
            size = out.shape[d]
            out = out.narrow(d, 1, size - 1) - out.narrow(d, 0, size - 1)
        return out

    def median(self, dim=None, keepdim: bool = False):
        """The lower median (as torch): a 0-d tensor, or (values, indices) along dim."""
        if dim is None:
            flat = self.reshape(-1)
            return sort(flat).values[(flat.numel() - 1) // 2]
        d = _dim("median", dim, self.ndim)
        values, indices = sort(self, d)
        middle = (self.shape[d] - 1) // 2
        pick = (slice(None),) * d + (slice(middle, middle + 1),)
        values, indices = values[pick], indices[pick]
        return MaxResult(values if keepdim else values.squeeze(d), indices if keepdim else indices.squeeze(d))

    def unique(self, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, dim=None):
        return unique(self, sorted, return_inverse, return_counts, dim)

    def bincount(self, weights=None, minlength: int = 0):
        return bincount(self, weights, minlength)

    def true_divide(self, other):
        return self / other

    def type(self, dtype=None, non_blocking: bool = False):
        """x.type() -> torch's type string ('torch.FloatTensor'); x.type(dtype) converts."""
        if dtype is None:
            names = {float32: "Float", float16: "Half", int64: "Long", int32: "Int", bool_: "Bool",
                     dtypes.float64: "Double"}
            return f"torch.{names[self.dtype]}Tensor"
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            names = {"torch.FloatTensor": float32, "torch.LongTensor": int64, "torch.IntTensor": int32,
                     "torch.DoubleTensor": dtypes.float64, "torch.cuda.DoubleTensor": dtypes.float64,
                     "torch.BoolTensor": bool_, "torch.cuda.FloatTensor": float32, "torch.cuda.LongTensor": int64,
                     "torch.HalfTensor": float16, "torch.cuda.HalfTensor": float16}
            if dtype not in names:
                raise ValueError(f"type: unknown tensor type {dtype!r}")
            dtype = names[dtype]
        return self.to(dtype)

    def pin_memory(self, device=None):
        return self

    def share_memory_(self):
        return self

    def log_(self):
        return _inplace(self, self.log(), "log_")

    def bernoulli_(self, p=0.5, generator=None):
        draws = _generator_rng(generator).random(self.shape) < (p.numpy() if isinstance(p, Tensor) else p)
        return _inplace(self, tensor(draws, dtype=self.dtype), "bernoulli_")

    def __contains__(self, element) -> bool:
        return bool(_compare("eq", self, element).any())

    def stride(self, dim=None):
        """The step in elements between neighbours along each dim, as torch's."""
        strides = tuple(layout(self)[0])
        return strides if dim is None else strides[_dim("stride", dim, self.ndim)]

    def take_along_dim(self, indices, dim=None):
        if dim is None:
            return gather(self.reshape(-1), 0, indices.reshape(-1))
        d = _dim("take_along_dim", dim, self.ndim)
        shape = list(broadcast_shapes("take_along_dim", self.shape[:d] + (1,) + self.shape[d + 1:],
                                      indices.shape[:d] + (1,) + indices.shape[d + 1:]))
        x_shape, i_shape = list(shape), list(shape)
        x_shape[d], i_shape[d] = self.shape[d], indices.shape[d]
        x = self if tuple(x_shape) == self.shape else expand(self, tuple(x_shape))
        return gather(x, d, indices if tuple(i_shape) == indices.shape else expand(indices, tuple(i_shape)))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1):
        return diagonal(self, offset, dim1, dim2)

    def trace(self):
        return self.diagonal().sum()

    def index_add(self, dim: int, index, source, *, alpha=1):
        d = _dim("index_add", dim, self.ndim)
        index = _index_tensor("index_add", index)
        shape = [1] * self.ndim
        shape[d] = index.numel()
        full_index = expand(index.reshape(tuple(shape)), source.shape)
        return self.scatter_add(d, full_index, source if alpha == 1 else source * alpha)

    def index_add_(self, dim: int, index, source, *, alpha=1):
        return _inplace(self, self.index_add(dim, index, source, alpha=alpha), "index_add_")

    def index_fill(self, dim: int, index, value):
        """value at the positions `index` (a 1-D or 0-d integer tensor, negatives wrap) along dim."""
        if self.ndim == 0:  # torch treats a 0-d tensor as one position along dim 0
            _dim("index_fill", dim, 1)
            return self.reshape(1).index_fill(0, index, value).reshape(())
        d = _dim("index_fill", dim, self.ndim)
        index = _index_tensor("index_fill", index)
        if index.ndim > 1:
            raise ValueError(f"index_fill: index must be 1-D or 0-d, got shape {index.shape}")
        _check_index_range("index_fill", index, self.shape[d], d)
        index = index.reshape(-1)
        hit = zeros(self.shape[d]).index_add(0, index, ones(index.numel())) > 0
        shape = [1] * self.ndim
        shape[d] = self.shape[d]
        return self.masked_fill(hit.reshape(tuple(shape)), value)

    def index_fill_(self, dim: int, index, value):
        return _inplace(self, self.index_fill(dim, index, value), "index_fill_")

    def index_copy(self, dim: int, index, source):
        """self with its slices `index` along dim replaced by source's slices, in order."""
        source = _to_tensor(source)
        if self.ndim == 0 or source.ndim == 0:
            return self.reshape(1).index_copy(0, index, source.reshape(-1)).reshape(self.shape)
        d = _dim("index_copy", dim, self.ndim)
        index = _index_tensor("index_copy", index)
        if index.ndim > 1:
            raise ValueError(f"index_copy: index must be 1-D or 0-d, got shape {index.shape}")
        _check_index_range("index_copy", index, self.shape[d], d, negative=False)  # torch refuses negatives here
        want = self.shape[:d] + (index.numel(),) + self.shape[d + 1:]
        if source.shape != want:
            raise ValueError(f"index_copy: source of shape {want} expected ({index.numel()} indices along dim {d} "
                             f"of a tensor of shape {self.shape}), got {source.shape}")
        shape = [1] * self.ndim
        shape[d] = index.numel()
        return self.scatter(d, expand(index.reshape(tuple(shape)), source.shape), source)

    def index_copy_(self, dim: int, index, source):
        return _inplace(self, self.index_copy(dim, index, source), "index_copy_")

    def masked_scatter(self, mask, source):
        """source's elements, in order, at the positions where mask (bool, broadcast to self) is
        true; self elsewhere. Reads the mask to the host (the count decides the shapes)."""
        mask, source = _to_tensor(mask), _to_tensor(source)
        if mask.dtype is not bool_:
            raise ValueError(f"masked_scatter: mask must be a bool tensor, got {mask.dtype}")
        if broadcast_shapes("masked_scatter", self.shape, mask.shape) != self.shape:
            raise ValueError(f"masked_scatter: mask of shape {mask.shape} does not broadcast to {self.shape}")
        positions = np.flatnonzero(np.broadcast_to(mask.numpy(), self.shape))
        if source.numel() < positions.size:
            raise ValueError(f"masked_scatter: source has {source.numel()} elements, fewer than the mask's "
                             f"{positions.size} true positions")
        if positions.size == 0:
            return self.clone()
        values = source.reshape(-1)[:positions.size]
        return self.reshape(-1).scatter(0, tensor(positions.astype(np.int64)), values).reshape(self.shape)

    def masked_scatter_(self, mask, source):
        return _inplace(self, self.masked_scatter(mask, source), "masked_scatter_")

    def cummax(self, dim: int):
        """(running maximum along dim, index where it was last attained) as torch: ties and NaN
        (which then stays) take the later index."""
        return _cumulative_extreme("cummax", self, dim, "ge")

    def cummin(self, dim: int):
        """(running minimum along dim, index where it was last attained), as cummax."""
        return _cumulative_extreme("cummin", self, dim, "le")

    def det(self):
        return det(self)

    def logdet(self):
        return logdet(self)

    def slogdet(self):
        return slogdet(self)

    def inverse(self):
        return inv(self)

    def mode(self, dim: int = -1, keepdim: bool = False):
        """(the most frequent value along dim, the index of its last occurrence), as torch:
        among equally frequent values the smallest; NaNs count one each. From a sort: each
        run of equal sorted values is measured by the position of its start (a running max)."""
        if self.ndim == 0:
            _dim("mode", dim, 1)
            return MaxResult(self * 1, zeros((), dtype=int64))
        d = _dim("mode", dim, self.ndim)
        n = self.shape[d]
        if n == 0:
            raise ValueError(f"mode: dimension {d} of shape {self.shape} is empty")
        with no_grad():
            values, order = sort(movedim(self.detach(), d, -1), -1)
            position = expand(arange(n, dtype=int64), values.shape)
            new_run = cat([full(values.shape[:-1] + (1,), True, dtype=bool_),
                           _compare("ne", values[..., 1:], values[..., :-1])], -1)
            start = where(new_run, position, 0).cummax(-1).values
            length = position - start + 1  # at a run's last element, the run's count
            end = length.argmax(-1, keepdim=True)  # the first longest run: the smallest value
            first = start.gather(-1, end)
            in_run = (position >= first) & (position <= end)
            index = where(in_run, order, -1).amax(-1, keepdim=True)  # its last occurrence
            index = movedim(index, -1, d)
        out = self.gather(d, index)
        if not keepdim:
            out, index = out.squeeze(d), index.squeeze(d)
        return MaxResult(out, index)

    def histc(self, bins: int = 100, min=0, max=0):
        """Counts of the values in `bins` equal bins over [min, max] (the data's range when both
        are 0; one unit either side when that range is a point); values outside are left out,
        max falls in the last bin. Not differentiable, as torch's."""
        if not self.dtype.is_floating_point:
            raise ValueError(f"histc: expected a float tensor, got {self.dtype}")
        if bins < 1:
            raise ValueError(f"histc: bins must be positive, got {bins}")
        low, high = float(min), float(max)
        if low > high:
            raise ValueError(f"histc: max ({high}) must not be below min ({low})")
        flat = self.detach().reshape(-1)
        if low == high == 0.0 and flat.numel():
            low, high = float(flat.amin().item()), float(flat.amax().item())
        if low == high:
            low, high = low - 1.0, high + 1.0
        if not (np.isfinite(low) and np.isfinite(high)):
            raise ValueError(f"histc: range of [{low}, {high}] is not finite")
        inside = (flat >= low) & (flat <= high)
        position = ((flat - low) * (bins / (high - low))).floor().clamp(0, bins - 1)
        counts = bincount(_cast(where(inside, position, 0.0), int64), _cast(inside, float32), bins)
        return counts if counts.dtype is self.dtype else _cast(counts, self.dtype)

    def exponential_(self, lambd: float = 1.0, generator=None):
        """Fill with draws of an exponential distribution of rate lambd."""
        if not lambd > 0:
            raise ValueError(f"exponential_: lambd must be positive, got {lambd}")
        values = _generator_rng(generator).exponential(1.0 / lambd, self.shape)
        values = values if self.dtype is dtypes.float64 else values.astype(np.float32)
        return _inplace(self, tensor(values, dtype=self.dtype), "exponential_")

    def apply_(self, callable):
        """Each element replaced by callable(element) (a Python function of one number), through
        the host as torch's CPU-only apply_."""
        host = self.numpy()
        values = np.vectorize(callable, otypes=[host.dtype])(host) if host.size else host
        return _inplace(self, tensor(np.asarray(values), dtype=self.dtype), "apply_")

    def as_strided(self, size, stride, storage_offset=None):
        return as_strided(self, size, stride, storage_offset)

    def unfold(self, dimension: int, size: int, step: int):
        """Windows of `size` elements every `step` along dimension, as a new last dimension (a view)."""
        return unfold(self, dimension, size, step)

    def aminmax(self, *, dim=None, keepdim: bool = False):
        return namedtuple("aminmax", ["min", "max"])(self.amin(dim, keepdim), self.amax(dim, keepdim))  # type: ignore[call-arg]

    def inner(self, other):
        other = _to_tensor(other)
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        return matmul(self, other.transpose(-1, -2) if other.ndim > 1 else other)

    def cross(self, other, dim: int = -1):
        d = _dim("cross", dim, self.ndim)
        if self.shape[d] != 3:
            raise ValueError(f"cross: dimension {d} must have size 3, got shape {self.shape}")
        a, b = self.unbind(d), _to_tensor(other).unbind(d)
        return stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]], d)

    def hypot(self, other):
        return (self * self + other * other).sqrt()

    def rot90(self, k: int = 1, dims=(0, 1)):
        k %= 4
        a, b = dims
        if k == 0:
            return self.clone()
        if k == 2:
            return self.flip((a, b))
        return self.flip(b).transpose(a, b) if k == 1 else self.transpose(a, b).flip(b)

    def kthvalue(self, k: int, dim: int = -1, keepdim: bool = False):
        d = _dim("kthvalue", dim, self.ndim)
        values, indices = sort(self, d)
        pick = (slice(None),) * d + (slice(k - 1, k),)
        values, indices = values[pick], indices[pick]
        return MaxResult(values if keepdim else values.squeeze(d), indices if keepdim else indices.squeeze(d))

    def quantile(self, q, dim=None, keepdim: bool = False, interpolation: str = "linear"):
        """Linear-interpolated quantile(s) q in [0, 1] (a number or a 1-D tensor), as torch."""
        if interpolation != "linear":
            raise ValueError(f"quantile: only interpolation='linear' is supported, got {interpolation!r}")
        x = self.reshape(-1) if dim is None else self
        d = 0 if dim is None else _dim("quantile", dim, self.ndim)
        ordered = sort(x, d).values
        n = x.shape[d]
        qs = q.tolist() if isinstance(q, Tensor) else q
        outs = []
        for value in (qs if isinstance(qs, (list, tuple)) else [qs]):
            pos = float(value) * (n - 1)
            lo, frac = int(math.floor(pos)), pos - math.floor(pos)
            below = ordered.narrow(d, lo, 1)
            above = ordered.narrow(d, min(lo + 1, n - 1), 1)
            out = below + (above - below) * frac
            out = out if keepdim and dim is not None else out.squeeze(d)
            outs.append(out)
        return stack(outs) if isinstance(qs, (list, tuple)) else outs[0]

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def relu_(self):
        return _inplace(self, self.relu(), "relu_")

    def exp_(self):
        return _inplace(self, self.exp(), "exp_")

    def sqrt_(self):
        return _inplace(self, self.sqrt(), "sqrt_")

    def abs_(self):
        return _inplace(self, self.abs(), "abs_")

    def sigmoid_(self):
        return _inplace(self, self.sigmoid(), "sigmoid_")

    def tanh_(self):
        return _inplace(self, self.tanh(), "tanh_")


class Storage:
    """torch's untyped_storage() of a tensor: what it and its views share (the base tensor)."""

    __slots__ = ("_owner",)

    def __init__(self, owner: Tensor):
        self._owner = owner

    def data_ptr(self) -> int:
        return id(self._owner)

    def nbytes(self) -> int:
        return self._owner.numel() * self._owner.element_size()

    def size(self) -> int:
        return self.nbytes()

    def __eq__(self, other) -> bool:
        return isinstance(other, Storage) and other._owner is self._owner

    __hash__ = None  # type: ignore[assignment]


class StridedView(Tensor):
    """A view whose elements are not its base's whole buffer in row-major order (a slice,
    a transpose, an expand, ...): `_view` = (strides, offset) in elements of
    `_base._buf`. Reading `_buf` gathers the elements into a new contiguous Buffer (one
    strided-gather kernel), so kernels see an ordinary operand holding the base's current
    values; in-place ops write back through `inplace.py`. See tensor/views.py."""

    __slots__ = ()

    def __init__(self, base: Tensor, shape, dtype, strides: tuple, offset: int):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.requires_grad = False
        self.grad = None
        self._entry = None
        self._parents = ()
        self._host = None
        self._retain = False
        self._hooks = None
        self._key = id(self)
        self._base = base
        self._view = (strides, offset)
        self._version = base._version  # (a view's own counter: its base's version when its entry was made)

    @property  # type: ignore[override]
    def _buf(self):
        base = self._base
        strides, offset = self._view
        return base._buf._dev.strided_gather(base._buf, self.shape, strides, offset)

    @property
    def _dev(self):
        return self._base._buf._dev

    @property
    def device(self):
        return placement.device_of(self._base._buf._dev)


# The modules holding the ops import Tensor from here, so the methods above reach them
# through names bound once the class exists.
from .recording import _freed_entry, _record, _topological_order  # noqa: E402
from .creation import arange, full, multinomial, ones, tensor, uninitialized, zeros, zeros_like  # noqa: E402
from ..ops.determinism import fills_uninitialized_memory  # noqa: E402
from .elementwise import _as_float, _binary, _cast, _compare, _int_binary, _result_dtype, _to_tensor, _unary  # noqa: E402
from .views import as_strided, detached, regeometry, untracked, multi_output_views, diagonal, expand, is_row_major, layout, permute, reshape, squeezed, unfold, unsqueezed, view  # noqa: E402
from .inplace import _inplace  # noqa: E402
from .indexing import _check_index_range, _index_tensor, gather, getitem, index_select, nonzero, scatter, setitem, where  # noqa: E402
from .shape import _triangle, cat, diag, flip, movedim, repeat_interleave, roll, stack  # noqa: E402
from .special import Erfinv, Lgamma, _digamma_values  # noqa: E402
from .linear import _scaled_sum, matmul  # noqa: E402
from .reductions import _arg_reduce, _cumulative_extreme, _dims, _reduce_extreme, _reduce_sum, cumprod, cumsum, log_softmax, logsumexp, prod, softmax  # noqa: E402
from .sorting import bincount, sort, topk, unique  # noqa: E402
from .linalg import det, inv, logdet, slogdet, vector_norm  # noqa: E402
