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
import copy
import functools
import itertools
import math
import threading
from collections import namedtuple
from typing import Sequence

import numpy as np

from . import amp, dtypes, placement
from .autograd.engine import Entry, reverse_walk
from .autograd.rules import backward as rule
from .dtypes import bfloat16, float16, float32, int32, int64, promote, to_dtype
from .ops import gpu
from .ops.nd import broadcast_shapes, contiguous_strides, numel

bool_ = dtypes.bool
long = int64
half = float16

_BUF_DTYPE = {d: d.storage for d in dtypes.ALL}  # Tensor dtype -> Buffer dtype
_NP_DTYPE = {float32: np.float32, float16: np.float16, int32: np.int32, int64: np.int32,
             bool_: np.float32}  # as stored

_state = threading.local()
_seed = [int(np.random.SeedSequence().generate_state(1, np.uint64)[0])]  # initial_seed(): unseeded runs differ
_rng = [np.random.default_rng(_seed[0])]
# Called as hook(leaves) after every backward has written the leaves' .grad (DistributedDataParallel
# averages the gradients across processes there).
post_backward_hooks: list = []
# Called as hook(leaf) during backward as soon as the leaf's .grad is final for this backward
# (every op that reads it has been differentiated), while the rest is still being recorded
# (DistributedDataParallel starts reducing a bucket there). Costs nothing while empty.
grad_ready_hooks: list = []

# torch.autograd's anomaly mode (set_detect_anomaly / detect_anomaly): with it on, every backward
# rule's gradients are read back and a NaN among them raises, naming the rule.
_ANOMALY = {"enabled": False, "check_nan": True}


def is_anomaly_enabled() -> bool:
    return _ANOMALY["enabled"]


def is_anomaly_check_nan_enabled() -> bool:
    return _ANOMALY["check_nan"]


class set_detect_anomaly:
    """torch.autograd.set_detect_anomaly(mode, check_nan=True): on or off from the call on, and
    as a context manager back to the previous setting at its end."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self._previous = dict(_ANOMALY)
        _ANOMALY.update(enabled=bool(mode), check_nan=bool(check_nan))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        _ANOMALY.update(self._previous)


class detect_anomaly(contextlib.ContextDecorator):
    """torch.autograd.detect_anomaly(check_nan=True): anomaly mode on inside the block (or the
    decorated function)."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = bool(check_nan)
        self._previous: list = []

    def __enter__(self):
        self._previous.append(dict(_ANOMALY))
        _ANOMALY.update(enabled=True, check_nan=self.check_nan)
        return self

    def __exit__(self, *exc) -> None:
        _ANOMALY.update(self._previous.pop())


def _nan_check(dev):
    def check(entry: Entry, grads) -> None:
        for i, grad in enumerate(grads):
            if grad is not None and grad.dtype in ("f32", "f16") and np.isnan(dev.read(grad)).any():
                raise RuntimeError(f"Function '{entry.name}Backward' returned nan values in its {i}th output.")
    return check

MaxResult = namedtuple("MaxResult", ["values", "indices"])


def is_grad_enabled() -> bool:
    return getattr(_state, "grad_enabled", True)


class _GradMode(contextlib.ContextDecorator):
    """Sets grad mode to `_mode` inside: `with no_grad():`, `@no_grad()` and bare `@no_grad`."""

    _mode = False

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        if not callable(orig_func):
            raise ValueError(f"{cls.__name__}: expected no argument or a function to decorate, got {orig_func!r}")
        return cls()(orig_func)

    def __init__(self, orig_func=None):
        self._saved = []  # a stack: one decorator instance may be entered again by recursion

    def __enter__(self):
        self._saved.append(is_grad_enabled())
        _state.grad_enabled = self._mode

    def __exit__(self, *exc):
        _state.grad_enabled = self._saved.pop()
        return False


class no_grad(_GradMode):
    """Context manager / decorator: ops inside record nothing for autograd."""


class enable_grad(_GradMode):
    """Context manager / decorator: ops inside record for autograd (inside a no_grad block too)."""

    _mode = True


class inference_mode(_GradMode):
    """torch.inference_mode(mode=True): no_grad when mode is True; inference_mode(False) records
    again. anygpu keeps no 'inference tensor' flag, so tensors made inside may later join
    autograd graphs (torch refuses that)."""

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):
            return cls()(mode)
        return object.__new__(cls)

    def __init__(self, mode: bool = True):
        super().__init__()
        self._enabled = bool(mode)

    def __enter__(self):
        self._saved.append((is_grad_enabled(), is_inference_mode_enabled()))
        # As torch: inference_mode(False) turns recording back on (inside no_grad too).
        _state.grad_enabled = not self._enabled
        _state.inference = self._enabled

    def __exit__(self, *exc):
        _state.grad_enabled, _state.inference = self._saved.pop()
        return False


def is_inference_mode_enabled() -> bool:
    return getattr(_state, "inference", False)


class set_grad_enabled:
    """Switch autograd recording on or off: as a call (`set_grad_enabled(False)` takes effect
    at once), as a context manager (restores the previous mode on exit) or as a decorator."""

    def __init__(self, mode: bool):
        self._prev = is_grad_enabled()
        self._mode = bool(mode)
        _state.grad_enabled = self._mode

    def __call__(self, func):
        _state.grad_enabled = self._prev  # decorating must not change the mode around it
        mode = self._mode

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return func(*args, **kwargs)
        return wrapper

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _state.grad_enabled = self._prev
        return False


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand/randn/dropout/initialisation."""
    seed = int(seed)
    _seed[0] = seed
    _rng[0] = np.random.default_rng(seed)


def initial_seed() -> int:
    """The seed of the random stream: the last manual_seed / seed, or the one drawn at start."""
    return _seed[0]


def seed() -> int:
    """Seed the random stream from a non-deterministic source; return that seed (torch.seed)."""
    fresh = int(np.random.SeedSequence().generate_state(1, np.uint64)[0]) >> 1  # a non-negative int64
    manual_seed(fresh)
    return fresh


_STATE_WORDS = 10  # PCG64's 128-bit state and increment, its buffered half-word and flag: 32-bit words


def get_rng_state() -> "Tensor":
    """The random stream's state as an int32 Tensor (torch gives a ByteTensor; both are opaque:
    save it, hand it back to set_rng_state)."""
    state = _rng[0].bit_generator.state
    if state.get("bit_generator") != "PCG64":
        raise RuntimeError(f"get_rng_state: the random stream is a {state.get('bit_generator')}, expected PCG64")
    words = []
    for value, count in ((state["state"]["state"], 4), (state["state"]["inc"], 4),
                         (state["has_uint32"], 1), (state["uinteger"], 1)):
        words += [(int(value) >> (32 * k)) & 0xFFFFFFFF for k in range(count)]
    return tensor(np.array(words, np.uint32).view(np.int32), dtype=int32)


def set_rng_state(new_state) -> None:
    """Put back a state from get_rng_state."""
    if not isinstance(new_state, Tensor) or new_state.numel() != _STATE_WORDS or new_state.dtype is not int32:
        raise ValueError(f"set_rng_state: expected the int32 Tensor of {_STATE_WORDS} words that get_rng_state "
                         f"gives, got {new_state!r:.80}")
    words = [int(w) for w in new_state.numpy().astype(np.int32).view(np.uint32)]

    def join(part):
        return sum(w << (32 * k) for k, w in enumerate(part))
    generator = np.random.PCG64()
    generator.state = {"bit_generator": "PCG64", "state": {"state": join(words[0:4]), "inc": join(words[4:8])},
                       "has_uint32": words[8], "uinteger": words[9]}
    _rng[0] = np.random.Generator(generator)


def default_generator() -> np.random.Generator:
    return _rng[0]


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
                 "_host", "_retain", "_key", "_torch_strides", "_hooks", "__weakref__")
    # _host: the host array an integer tensor was made from, kept only so index checks
    # (class indices, embedding ids) can run before GPU work. Never used for reads:
    # in-place updates of a shared buffer would leave it stale.
    __array_priority__ = 1000  # numpy defers to our reflected operators

    def __init__(self, buf, shape, dtype: str = float32, requires_grad: bool = False):
        self._buf = buf
        self.shape = tuple(shape)
        # A float kernel's result keeps its input's storage: f16 Buffers are float16 tensors.
        self.dtype = float16 if dtype is float32 and getattr(buf, "dtype", None) == "f16" else dtype
        self.requires_grad = bool(requires_grad)
        self.grad: Tensor | None = None
        self._entry: Entry | None = None
        self._parents: tuple = ()
        self._host = None
        self._retain = False
        self._hooks: dict | None = None  # register_hook: handle id -> hook, in order
        self._key = id(self)  # the autograd engine's name for this value (a new one after an in-place op)
        # None, or the strides torch's result would have where torch gives a non-contiguous
        # view (permute, transpose, expand): `view` refuses what torch refuses on those.
        self._torch_strides = None

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
        new._torch_strides = self._torch_strides
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
        """A host copy with this tensor's shape (float32, int32, int64 or bool)."""
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
        if self.dtype is not float32 and self.dtype is not int64 and self.dtype is not bool_:
            extra += f", dtype={self.dtype}"  # torch shows only non-default dtypes
        if self.dtype is bool_ and self.numel() == 0:
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
        return _record("clone", Tensor(dev.copy(self._buf), self.shape, self.dtype), (self,),
                       rule("clone", dev))

    def contiguous(self) -> "Tensor":
        return self if self._torch_strides is None else reshape(self, self.shape)

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
                "float32", "float", "int32", "int64", "long", "int", "bool", "float16", "half", "bfloat16"):
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
            seed = dev.upload(np.ones(1, _NP_DTYPE[self.dtype]))
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
                leaf.grad = Tensor(dev.add(leaf.grad._buf, grad), leaf.shape, leaf.dtype)

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
        scale, ratio = self._scaled_var(dim, keepdim, correction)
        return ratio * scale * scale

    def _scaled_var(self, dim, keepdim: bool, correction):
        """(scale, ratio) with var = scale**2 * ratio: the deviations are divided by their
        largest magnitude (a constant for autograd) before squaring, so values near 1e30,
        whose squares overflow float32, still give a finite std."""
        centered = self - self.mean(dim, keepdim=True)
        peak = centered.detach().abs()
        for d in sorted(_dims("var", dim, self.ndim), reverse=True):
            peak = peak.max(d, keepdim=True)[0] if peak.shape[d] else peak.sum(d, keepdim=True)
        peak = where(peak == 0.0, 1.0, peak)
        normalized = centered / peak
        total = (normalized * normalized).sum(dim, keepdim=keepdim)
        divisor = (self.numel() // max(total.numel(), 1) if self.numel() else 0) - correction
        return peak.reshape(total.shape), total * (1.0 / divisor if divisor > 0 else math.nan)

    def std(self, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
        if isinstance(dim, bool):
            dim, unbiased = None, dim
        if correction is None:
            correction = 0 if unbiased is False else 1
        if self._scalar_dim("std", dim):
            return self.reshape(1).std(0, correction=correction)
        scale, ratio = self._scaled_var(dim, keepdim, correction)
        return ratio.sqrt() * scale

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
        out = reshape(self, shape)
        if self._torch_strides is not None:
            strides = _view_strides(self.shape, self._torch_strides, out.shape)
            if strides is None:
                raise ValueError(f"view: shape {out.shape} is not compatible with the size {self.shape} and strides "
                                 f"{self._torch_strides} this tensor has in torch (a permuted or expanded view); "
                                 f"use .reshape(...) or .contiguous().view(...)")
            out._torch_strides = None if _torch_contiguous(out.shape, strides) else strides
        return out

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
        return tuple(pieces)

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
        values = _generator_rng(generator).uniform(a, b, self.shape).astype(np.float32)
        return _inplace(self, tensor(values, dtype=self.dtype), "uniform_")

    def normal_(self, mean: float = 0.0, std: float = 1.0, generator=None):
        values = _generator_rng(generator).normal(mean, std, self.shape).astype(np.float32)
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
        """The same values outside the graph (sharing the buffer: in-place ops on it change this tensor)."""
        return self.detach()

    @data.setter
    def data(self, value: "Tensor") -> None:
        if not isinstance(value, Tensor):
            raise ValueError(f"data: expected a Tensor, got {type(value).__name__}")
        if value.shape != self.shape:
            self.shape = value.shape
        self._buf, self.dtype, self._host = value._buf, value.dtype, value._host

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
        return self._torch_strides is None

    def new_tensor(self, data, dtype=None, device=None, requires_grad: bool = False):
        return tensor(data, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_zeros(self, *size, dtype=None, device=None, requires_grad: bool = False):
        return zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, device=None, requires_grad: bool = False):
        return ones(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, device=None, requires_grad: bool = False):
        return zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_full(self, size, fill_value, dtype=None, device=None, requires_grad: bool = False):
        return full(size, fill_value, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def narrow(self, dim: int, start: int, length: int):
        d = _dim("narrow", dim, self.ndim)
        return getitem(self, (slice(None),) * d + (slice(start, start + length),))

    def unbind(self, dim: int = 0):
        d = _dim("unbind", dim, self.ndim)
        return tuple(getitem(self, (slice(None),) * d + (i,)) for i in range(self.shape[d]))

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
        from .linalg import vector_norm  # (linalg sits on this module)

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
        return _lgamma_function().apply(self)

    def digamma(self):
        """Gamma'(x) / Gamma(x): shifted up by 6 (the recurrence), then the asymptotic series;
        reflection for x < 0; -inf at +0, +inf at -0, NaN at the negative integers, as torch.
        Differentiable (its gradient is the series' derivative: trigamma to float32 accuracy)."""
        x = self if self.dtype is float32 else _cast(self, float32)
        out = _digamma_values(x)
        return out if self.dtype is not float16 else _cast(out, float16)

    def erfinv(self):
        """The inverse of erf on [-1, 1] (+-inf at +-1, NaN outside), from M. Giles' single-precision
        polynomials ("Approximating the erfinv function", GPU Computing Gems, 2011) in the
        elementwise ops; gradient sqrt(pi) / 2 * exp(erfinv(x)^2), as torch's."""
        return _erfinv_function().apply(self)

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
            names = {float32: "Float", float16: "Half", int64: "Long", int32: "Int", bool_: "Bool"}
            return f"torch.{names[self.dtype]}Tensor"
        if isinstance(dtype, str) and dtype.endswith("Tensor"):
            names = {"torch.FloatTensor": float32, "torch.LongTensor": int64, "torch.IntTensor": int32,
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
        """The strides of this (always contiguous) tensor's layout."""
        strides = contiguous_strides(self.shape)
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
        d1, d2 = _dim("diagonal", dim1, self.ndim), _dim("diagonal", dim2, self.ndim)
        moved = movedim(self, (d1, d2), (-2, -1))
        rows, cols = moved.shape[-2:]
        length = max(0, min(rows + min(offset, 0), cols - max(offset, 0)))
        r = arange(length) + max(-offset, 0)
        return getitem(moved, (Ellipsis, r, r + offset))

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
        from .linalg import det
        return det(self)

    def logdet(self):
        from .linalg import logdet
        return logdet(self)

    def slogdet(self):
        from .linalg import slogdet
        return slogdet(self)

    def inverse(self):
        from .linalg import inv
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
        values = _generator_rng(generator).exponential(1.0 / lambd, self.shape).astype(np.float32)
        return _inplace(self, tensor(values, dtype=self.dtype), "exponential_")

    def apply_(self, callable):
        """Each element replaced by callable(element) (a Python function of one number), through
        the host as torch's CPU-only apply_."""
        host = self.numpy()
        values = np.vectorize(callable, otypes=[host.dtype])(host) if host.size else host
        return _inplace(self, tensor(np.asarray(values), dtype=self.dtype), "apply_")

    def as_strided(self, size, stride, storage_offset=None):
        """torch's as_strided over this tensor's own elements in row-major order (a contiguous
        tensor's storage; every view here is a copy, so the result is one too, and an explicit
        offset counts from this tensor's first element). Overlapping positions sum their gradients."""
        size, stride = tuple(int(v) for v in size), tuple(int(v) for v in stride)
        offset = 0 if storage_offset is None else int(storage_offset)
        if len(size) != len(stride):
            raise ValueError(f"as_strided: size {size} and stride {stride} must have the same length")
        if min(size + stride + (offset,), default=0) < 0:
            raise ValueError(f"as_strided: sizes, strides and offset must not be negative, got {size}, {stride}, "
                             f"{offset}")
        flat = self.reshape(-1)
        if 0 in size:
            return flat[:0].reshape(size)
        positions = np.full(size, offset, dtype=np.int64)
        for k, (n, st) in enumerate(zip(size, stride)):
            positions = positions + (np.arange(n, dtype=np.int64) * st).reshape((1,) * k + (n,) + (1,) * (len(size) - k - 1))
        if positions.max() >= flat.numel():
            raise ValueError(f"as_strided: size {size} and stride {stride} at offset {offset} reach element "
                             f"{int(positions.max())} of a tensor of {flat.numel()} elements")
        return index_select(flat, 0, tensor(positions.reshape(-1))).reshape(size)

    def unfold(self, dimension: int, size: int, step: int):
        """Windows of `size` elements every `step` along dimension, as a new last dimension
        (torch's Tensor.unfold; a copy here, as every view is)."""
        if step < 1:
            raise ValueError(f"unfold: step must be positive, got {step}")
        length = self.shape[_dim("unfold", dimension, self.ndim)] if self.ndim else 1
        if size < 0 or size > length:
            raise ValueError(f"unfold: size must be in [0, {length}] (the length of dimension {dimension}), got {size}")
        if self.ndim == 0:
            return self.reshape(1)[:size]
        d = _dim("unfold", dimension, self.ndim)
        count = (length - size) // step + 1
        starts = np.arange(count, dtype=np.int64)[:, None] * step + np.arange(size, dtype=np.int64)[None, :]
        picked = index_select(self, d, tensor(starts.reshape(-1)))
        windows = picked.reshape(self.shape[:d] + (count, size) + self.shape[d + 1:])
        return movedim(windows, d + 1, -1)

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



# ===================================================================== construction

def _infer_dtype(arr: np.ndarray) -> dtypes.dtype:
    """torch's dtype for data: bool, int64 (int32 for int32/smaller numpy arrays), float32."""
    if arr.dtype.kind == "b":
        return bool_
    if arr.dtype.kind in "iu":
        return int64 if arr.dtype.itemsize >= 8 or arr.dtype == np.uint32 else int32
    if arr.dtype == np.float16:
        _check_half("tensor")
        return float16
    return float32


def tensor(data, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """A new tensor holding a copy of `data` (list, number, numpy array or Tensor)."""
    placement.check_device("tensor", device)
    if isinstance(data, Tensor):
        data = data.numpy()
    elif isinstance(data, (list, tuple)) and any(isinstance(v, Tensor) for v in data):
        data = [v.numpy() if isinstance(v, Tensor) else v for v in data]
    arr = np.asarray(data)
    if arr.dtype.kind not in "iubf":
        raise ValueError(f"tensor: cannot make a tensor from data of dtype {arr.dtype}")
    dtype = _infer_dtype(arr) if dtype is None else _normalize_dtype(dtype)
    if _is_int(dtype) and arr.size and (arr.max() > 2**31 - 1 or arr.min() < -2**31):
        raise ValueError("tensor: integer values out of the int32 range (anygpu stores integers in 32 bits)")
    if dtype is bool_:
        arr = arr != 0
    with np.errstate(over="ignore"):  # float16: beyond 65504 is inf, as torch
        host = np.array(arr, dtype=_NP_DTYPE[dtype], order="C")  # a copy; ascontiguousarray would make 0-d 1-d
    t = Tensor(gpu().upload(host.reshape(-1), _BUF_DTYPE[dtype]), host.shape, dtype)
    t._host = host
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(arr) -> Tensor:
    return tensor(arr)


def full(shape, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor of `shape` filled with fill_value; the dtype follows the value when not given
    (bool, int64 or float32), as in torch."""
    placement.check_device("full", device)
    shape = _as_shape("full", shape if isinstance(shape, (tuple, list)) else (shape,))
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, (bool, np.bool_)) else \
            int64 if isinstance(fill_value, (int, np.integer)) else float32
    dtype = _normalize_dtype(dtype, "full")
    dev = gpu()
    if dtype.is_floating_point or dtype is bool_:
        value = float(bool(fill_value)) if dtype is bool_ else float(fill_value)
        buf = dev.unary("fill", dev.empty(numel(shape)), value)
        buf = dev.cast(buf, "f16") if dtype is float16 else buf  # rounded as torch: 70000 -> inf
    else:
        _check_fits("full", numel(shape))
        buf = dev.upload(np.full(numel(shape), fill_value, np.int32))
    return Tensor(buf, shape, dtype, requires_grad)


def zeros(*shape, dtype=None, requires_grad: bool = False, device=None, out=None) -> Tensor:
    placement.check_device("zeros", device)
    shape = _as_shape("zeros", shape)
    dtype = _normalize_dtype(dtype, "zeros")
    return Tensor(gpu().alloc(numel(shape), _BUF_DTYPE[dtype]), shape, dtype, requires_grad)


def ones(*shape, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("ones", device)
    dtype = _normalize_dtype(dtype, "ones")
    return full(_as_shape("ones", shape), 1.0 if dtype.is_floating_point else 1,
                dtype=dtype, requires_grad=requires_grad)


def empty(*shape, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Zeros (anygpu never hands out uninitialised memory)."""
    placement.check_device("empty", device)
    return zeros(*shape, dtype=dtype, requires_grad=requires_grad)


def zeros_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("zeros_like", device)
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("ones_like", device)
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("empty_like", device)
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("full_like", device)
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """torch.arange: int64 when start, end and step are all integers, else float32."""
    placement.check_device("arange", device)
    if end is None:
        start, end = 0, start
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    span = (end - start) / step
    if not math.isfinite(span):
        raise ValueError(f"arange: the range from {start} to {end} by {step} is not finite")
    _check_fits("arange", max(math.ceil(span), 0))
    values = np.arange(start, end, step)
    if dtype is None:
        dtype = int64 if all(isinstance(v, (int, np.integer)) for v in (start, end, step)) else float32
    return tensor(values, dtype=dtype, requires_grad=requires_grad)


def linked_empty(out: Tensor, *inputs) -> Tensor:
    """`out`, the result of an op on empty operands (empty, or zeros such as a k = 0
    product), linked into the graph through each input that requires grad: their
    gradients are then zeros of their shapes, as torch's, instead of no gradient at all."""
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad and is_grad_enabled():
            out = out + x.sum() * 0.0
    return out


def _check_fits(op: str, count: int, itemsize: int = 4) -> None:
    """LimitError when `count` elements cannot be one buffer on this adapter: checked
    before any host array is built, so a huge request costs no host memory."""
    gpu()._check_size(int(count) * itemsize, op)


def _generator_rng(generator) -> np.random.Generator:
    """The numpy generator behind a `generator=` argument (None: the global one)."""
    if generator is None:
        return _rng[0]
    rng = getattr(generator, "numpy_rng", None) or getattr(generator, "_rng", None)
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(generator, np.random.Generator):
        return generator
    raise ValueError(f"generator: expected an anygpu.Generator, got {type(generator).__name__}")


def _random_float(op: str, shape, dtype, requires_grad, draw) -> Tensor:
    shape = _as_shape(op, shape)
    dtype = _normalize_dtype(dtype, op)
    if not dtype.is_floating_point:
        raise ValueError(f"{op}: dtype must be a float dtype, got {dtype}")
    _check_fits(op, numel(shape))
    return tensor(draw(shape), dtype=dtype, requires_grad=requires_grad)


def rand(*shape, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    placement.check_device("rand", device)
    rng = _generator_rng(generator)
    return _random_float("rand", shape, dtype, requires_grad, lambda s: rng.random(s, dtype=np.float32))


def randn(*shape, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    placement.check_device("randn", device)
    rng = _generator_rng(generator)
    return _random_float("randn", shape, dtype, requires_grad, lambda s: rng.standard_normal(s, dtype=np.float32))


def randint(*args, size=None, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """torch.randint(high, size) or randint(low, high, size): integers in [low, high), int64."""
    placement.check_device("randint", device)
    args = list(args)
    if size is None and args and isinstance(args[-1], (tuple, list)):
        size = args.pop()
    if len(args) == 1:
        low, high = 0, args[0]
    elif len(args) == 2:
        low, high = args
    else:
        raise ValueError(f"randint: expected (high, size) or (low, high, size), got {len(args)} numbers")
    if size is None:
        raise ValueError("randint: size is required, e.g. torch.randint(10, (3,))")
    low, high = int(low), int(high)
    if high <= low:
        raise ValueError(f"randint: expected low < high, got low={low}, high={high}")
    size = _as_shape("randint", tuple(size))
    _check_fits("randint", numel(size))
    values = _generator_rng(generator).integers(low, high, size=size)
    return tensor(values, dtype=int64 if dtype is None else dtype, requires_grad=requires_grad)


def _autocast(op: str, *operands):
    """The operands as autocast wants them for `op` (amp.policy): float tensors converted
    to float16 (matmul-type ops) or float32 (reductions, softmax, exp/log/pow), through
    recorded conversions; unchanged outside autocast and for other ops."""
    want = amp.policy(op) if amp._state.__dict__ else None
    if want is None:
        return operands
    return tuple(_cast(t, want) if isinstance(t, Tensor) and t.dtype.is_floating_point and t.dtype is not want
                 else t for t in operands)


def _to_tensor(value, like: Tensor | None = None) -> Tensor:
    """A Tensor for an operand: Python numbers become 0-d tensors of their own kind
    (bool, int64 or float32), so integer arithmetic stays integer."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (bool, np.bool_)):
        return full((), bool(value), dtype=bool_)
    if isinstance(value, (int, np.integer)):
        return full((), int(value), dtype=int64)
    if isinstance(value, (float, np.floating)):
        return full((), float(value))
    return tensor(value)


def _number_dtype(value) -> dtypes.dtype:
    if isinstance(value, (bool, np.bool_)):
        return bool_
    return int64 if isinstance(value, (int, np.integer)) else float32


def _result_dtype(a, b) -> dtypes.dtype:
    """torch's type promotion for a binary op: a tensor of higher category (bool < int <
    float) wins; a Python number or 0-d tensor only lifts the category, not the width."""
    def rank(dt):
        return 2 if dt.is_floating_point else 1 if _is_int(dt) else 0

    def strength(x):  # a tensor with dims > a 0-d tensor > a Python number
        return 0 if not isinstance(x, Tensor) else 1 if x.ndim == 0 else 2

    da = a.dtype if isinstance(a, Tensor) else _number_dtype(a)
    db = b.dtype if isinstance(b, Tensor) else _number_dtype(b)
    if strength(a) == strength(b):
        return promote(da, db)
    (strong, strong_dt), (weak, weak_dt) = sorted(((a, da), (b, db)), key=lambda p: -strength(p[0]))
    if rank(weak_dt) <= rank(strong_dt):
        return strong_dt
    if isinstance(weak, Tensor):
        return weak_dt
    return float32 if rank(weak_dt) == 2 else int64


# ===================================================================== recording

def _view_host(source: Tensor, host):
    """The host copy a view of `source` (sharing its buffer) may keep: integer tensors'
    only (index checks read it). Float buffers are updated in place (optimizers, running
    statistics), which would leave a view's copy stale."""
    return host if _is_int(source.dtype) else None


def _half_result(parents: Sequence[Tensor]) -> bool:
    """Whether torch's result of a float op on `parents` is float16: the float operands that
    decide (those with dims, else all; Python numbers arrive as 0-d float32) are all float16."""
    floats = [p for p in parents if p.dtype.is_floating_point]
    strong = [p for p in floats if p.ndim] or floats
    return bool(strong) and all(p.dtype is float16 for p in strong)


def _record(name: str, out: Tensor, parents: Sequence[Tensor], backward, native: bool = False) -> Tensor:
    """Attach the backward rule of the op that produced `out` (when grad is wanted).

    float16 operands: the ops compute in f32 (their kernels load f16 as f32, or their
    operands were converted), so a float32 result of float16 operands is rounded to f16
    here, once, and the backward converts: the rule runs on f32 gradients and each
    input's gradient is returned in its own storage dtype. `native`: the forward ran on
    the f16 Buffers themselves (elementwise ops of float16 operands, see _float_operands),
    so the rule runs on f16 gradients too (its kernels store f16 and compute in f32)."""
    if out.dtype is not float16 and not any(p.dtype is float16 for p in parents):
        return _attach(name, out, parents, backward)  # no float16 anywhere: the common path
    computed = out._buf.dtype if native or name in _HALF_RULES else "f32"
    if out.dtype is float32 and _half_result(parents):
        out._buf, out.dtype = gpu().cast(out._buf, "f16"), float16
    if backward is not None:
        backward = _converting_backward(backward, computed, tuple(p._buf.dtype for p in parents))
    return _attach(name, out, parents, backward)


# Ops whose forward ran on f16 Buffers and whose backward rule runs on them too (f16 stored,
# f32 math): matmul's gradients are matmuls of the f16 gradient with the f16 operands (summed
# in f32), softmax's backward reads the f16 gradient and output.
_HALF_RULES = {"matmul", "bmm", "softmax"}


def _converting_backward(backward, computed: str, wanted: tuple):
    """backward run on a gradient of the dtype the forward computed in (f32 for most rules:
    the values they saved are f32, or f16 loaded as f32), with each input's gradient
    converted to its storage dtype."""
    def run(grad_out):
        dev = gpu()
        grads = backward(grad_out if grad_out.dtype == computed else dev.cast(grad_out, computed))
        return tuple(g if g is None or want not in ("f32", "f16") or g.dtype == want else dev.cast(g, want)
                     for g, want in zip(grads, wanted))
    return run


def _attach(name: str, out: Tensor, parents: Sequence[Tensor], backward) -> Tensor:
    if is_grad_enabled() and any(p.requires_grad for p in parents):
        out.requires_grad = True
        out._parents = tuple(parents)
        out._entry = Entry(name, tuple(p._key for p in parents), out._key, backward)
    return out


def _freed_entry(entry: Entry) -> Entry:
    """What a backward without retain_graph leaves of a non-leaf's entry: its name, no saved
    values, and a rule that raises torch's error if a later backward reaches it."""
    def spent(grad):
        raise RuntimeError(
            f"Trying to backward through the graph a second time (through {entry.name}, whose saved values "
            f"were freed by the first backward). Specify retain_graph=True the first time, or detach() what "
            f"a new graph reuses")
    return Entry(entry.name, (), entry.output, spent)


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


def sum_dims(buf, shape, dims):
    """Sum a contiguous buffer of `shape` over `dims` (kept as size 1); see ops.nd.sum_dims."""
    return gpu().sum_dims(buf, shape, dims)


def sum_to_shape(grad_buf, grad_shape, shape):
    """Sum a broadcast gradient back down to `shape` (the inverse of broadcasting)."""
    return gpu().sum_to_shape(grad_buf, grad_shape, shape)


def _float_operand(t: Tensor):
    return t._buf if t._buf.dtype == "f32" else gpu().cast(t._buf, "f32")


def _float_operands(*tensors: Tensor) -> tuple:
    """The Buffers an elementwise float kernel reads: the f16 Buffers themselves when every
    operand is float16 (f16 storage, f32 math, the result rounded to f16 once: torch's half
    kernels, without converted copies), else each operand as f32 (mixed float16/float32
    computes in float32, as torch promotes)."""
    if all(t._buf.dtype == "f16" for t in tensors):
        return tuple(t._buf for t in tensors)
    return tuple(_float_operand(t) for t in tensors)


def _int_operand(t: Tensor):
    """t's elements as an i32 Buffer (bool's 0/1 words converted)."""
    return t._buf if t._buf.dtype == "i32" else gpu().cast(t._buf, "i32")


def _cast(x: Tensor, dtype, copy: bool = False) -> Tensor:
    """x converted to `dtype` (a new tensor unless the dtype is x's already): float -> int
    truncates toward zero, anything -> bool is `!= 0`, as torch."""
    if dtype is x.dtype:
        return x.clone() if copy else x
    dev = gpu()
    if dtype is bool_:
        return _compare("ne", x, 0)
    if dtype.is_floating_point:
        store = _BUF_DTYPE[dtype]
        if dtype is float16:
            _check_half("to")
        buf = dev.copy(x._buf) if x._buf.dtype == store else dev.cast(x._buf, store)
        out = Tensor(buf, x.shape, dtype)
        if not x.dtype.is_floating_point:
            return out
        source = x._buf.dtype  # float <-> float: the gradient goes back converted to x's dtype
        return _attach("to", out, (x,), rule("to", dev, source))
    buf = dev.copy(x._buf) if x._buf.dtype == "i32" else dev.cast(x._buf, "i32")
    out = Tensor(buf, x.shape, dtype)
    out._host = x._host if _is_int(x.dtype) else None
    return out


_INT_BINARY_OPS = {"add", "sub", "mul", "floordiv", "remainder", "pow", "maximum", "minimum",
                   "bitwise_and", "bitwise_or", "bitwise_xor"}


def _int_binary(name: str, a, b, out_dtype) -> Tensor:
    """Exact integer (or bool) arithmetic on the i32 kernels; never differentiable."""
    if name not in _INT_BINARY_OPS:
        raise ValueError(f"{name}: not defined for integer tensors (dtype {out_dtype})")
    if name == "pow" and not isinstance(b, Tensor) and b < 0:
        raise ValueError("pow: integers to negative integer powers are not allowed (use a float base)")
    if name == "sub" and out_dtype is bool_:
        raise ValueError("sub: subtracting bool tensors is not supported; use logical_xor or ~ instead")
    a, b = _to_tensor(a), _to_tensor(b)
    buf, shape = gpu().broadcast_binary_int(name, _int_operand(a), a.shape, _int_operand(b), b.shape)
    out = Tensor(buf, shape, int64 if out_dtype is bool_ else out_dtype)
    return _compare("ne", out, 0) if out_dtype is bool_ else out


def _is_scalar(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, np.bool_)


def _binary(name: str, a, b) -> Tensor:
    if name == "pow":
        a, b = _autocast(name, a, b)
    out_dtype = _result_dtype(a, b)
    if name == "div" or (name == "pow" and isinstance(b, float)):
        out_dtype = float32
    if not out_dtype.is_floating_point:
        return _int_binary(name, a, b, out_dtype)
    if name in ("floordiv", "remainder"):  # floats: floor(a / b) and a - b * floor(a / b), as torch
        quotient = _unary("floor", _binary("div", a, b))
        return quotient if name == "floordiv" else _binary("sub", a, _binary("mul", b, quotient))
    if name in _SCALAR_OPS and isinstance(a, Tensor) and _is_scalar(b):
        return _scalar_binary(name, a, float(b), reverse=False)
    if name in _SCALAR_OPS and isinstance(b, Tensor) and _is_scalar(a):
        return _scalar_binary(name, b, float(a), reverse=True)
    a = _to_tensor(a)
    b = _to_tensor(b)
    dev = gpu()
    a_buf, b_buf = _float_operands(a, b)  # the backward reads these, never int bits
    buf, shape = dev.broadcast_binary(name, a_buf, a.shape, b_buf, b.shape)
    out = Tensor(buf, shape)

    needs = (a.requires_grad, b.requires_grad)
    backward = rule(name, dev, a_buf, b_buf, buf, shapes=(a.shape, b.shape, shape), needs=needs)
    return _record(name, out, (a, b), backward, native=buf.dtype == "f16")


# Tensor-with-Python-scalar arithmetic as one unary launch: name -> (forward op, reversed op).
_SCALAR_OPS = {"add": ("add_scalar", "add_scalar"), "sub": ("add_scalar", "rsub_scalar"),
               "mul": ("scale", "scale"), "div": ("div_scalar", "rdiv_scalar"), "pow": ("pow_scalar", None)}


def _scalar_binary(name: str, x: Tensor, s: float, reverse: bool) -> Tensor:
    """x op s (or s op x when reverse) for a Python number s, with its backward."""
    op = _SCALAR_OPS[name][1 if reverse else 0]
    if op is None:  # s ** x: through the broadcasting kernel
        return _binary(name, full((), s), x)
    dev = gpu()
    xb, = _float_operands(x)
    alpha = -s if (name, reverse) == ("sub", False) else s
    out = Tensor(dev.unary(op, xb, alpha), x.shape)

    backward = rule(op, dev, xb, out._buf, alpha)
    return _record(name, out, (x,), backward, native=xb.dtype == "f16")


def _compare(name: str, a, b) -> Tensor:
    """An elementwise comparison: a bool tensor (never differentiable). Integers compare
    exactly on the i32 kernel, anything with a float on the float kernel."""
    exact_int = not _result_dtype(a, b).is_floating_point
    a = _to_tensor(a)
    b = _to_tensor(b)
    if exact_int:
        buf, shape = gpu().broadcast_binary_int(name, _int_operand(a), a.shape, _int_operand(b), b.shape)
    else:
        a_buf, b_buf = _float_operands(a, b)  # float16 with float16: compared as stored
        buf, shape = gpu().broadcast_binary(name, a_buf, a.shape, b_buf, b.shape)
    return Tensor(buf, shape, bool_)




def _int_unary(name: str, x: Tensor, alpha, beta) -> Tensor:
    """The unary ops that keep an integer dtype in torch, on the exact integer kernels."""
    if x.dtype is bool_:
        x = _cast(x, int64)
    if name == "neg":
        return _int_binary("sub", 0, x, x.dtype)
    if name == "abs":
        return _int_binary("maximum", x, _int_binary("sub", 0, x, x.dtype), x.dtype)
    if name == "square":
        return _int_binary("mul", x, x, x.dtype)
    if name == "relu":
        return _int_binary("maximum", x, 0, x.dtype)
    out = x  # clamp with integer bounds (None = no bound)
    if alpha is not None:
        out = _int_binary("maximum", out, int(alpha), x.dtype)
    if beta is not None:
        out = _int_binary("minimum", out, int(beta), x.dtype)
    return out.clone() if out is x else out


_INT_KEEPING_UNARY = {"neg", "abs", "square", "relu", "clamp"}


def _unary(name: str, x: Tensor, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    x, = _autocast(name, x)
    if not x.dtype.is_floating_point and name in _INT_KEEPING_UNARY:
        return _int_unary(name, x, alpha, beta)
    dev = gpu()
    xb, = _float_operands(x)
    out = Tensor(dev.unary(name, xb, alpha, beta), x.shape)
    return _record(name, out, (x,), rule(name, dev, xb, out._buf, alpha, beta), native=xb.dtype == "f16")


def unary_op(name: str, x: Tensor, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    """Apply a recorded unary op by name (relu, sigmoid, tanh, silu, gelu, exp, ...)."""
    return _unary(name, x, alpha, beta)


# ===================================================================== reductions

def _dims(op: str, dim, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    dims = tuple(sorted({_dim(op, d, ndim) for d in dim}))
    return dims


def _reduce_sum_int(x: Tensor, dims, keepdim: bool) -> Tensor:
    """Exact sum of an integer or bool tensor over dims: int64, as torch."""
    dev = gpu()
    buf, shape = _int_operand(x), list(x.shape)
    for d in sorted(dims, reverse=True):
        buf = dev.reduce_axis_int(buf, numel(shape[:d]), shape[d], numel(shape[d + 1:]), "sum")
        shape[d] = 1
    if buf is x._buf:
        buf = dev.copy(buf)
    out_shape = tuple(shape) if keepdim else tuple(s for i, s in enumerate(x.shape) if i not in dims)
    return Tensor(buf, out_shape, int64)


def _reduce_sum(x: Tensor, dim, keepdim: bool) -> Tensor:
    x, = _autocast("sum", x)
    dev = gpu()
    dims = _dims("sum", dim, x.ndim)
    if not x.dtype.is_floating_point:
        return _reduce_sum_int(x, dims, keepdim)
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
    if not x.dtype.is_floating_point:
        return _reduce_extreme_int(op, x, dim, keepdim)
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
    indices = Tensor(idx, out_shape, int64)

    _record(op, values, (x,), rule(op + "_dim", dev, idx, outer, mid, inner))
    return MaxResult(values, indices)


def _reduce_extreme_int(op: str, x: Tensor, dim, keepdim: bool):
    """max/min of an integer or bool tensor, exact: a value, or (values, indices) over dim."""
    dev = gpu()
    xb = _int_operand(x)
    if dim is None:
        if x.numel() == 0:
            raise ValueError(f"{op}: cannot reduce an empty tensor of shape {x.shape}")
        value = Tensor(dev.reduce_axis_int(xb, 1, x.numel(), 1, op), (), int64)
        return _cast(value, x.dtype)
    d = _dim(op, dim, x.ndim)
    outer, mid, inner = numel(x.shape[:d]), x.shape[d] if x.ndim else 1, numel(x.shape[d + 1:])
    out_shape = x.shape[:d] + ((1,) if keepdim else ()) + x.shape[d + 1:]
    values = _cast(Tensor(dev.reduce_axis_int(xb, outer, mid, inner, op), out_shape, int64), x.dtype)
    return MaxResult(values, Tensor(dev.reduce_axis_int(xb, outer, mid, inner, "arg" + op), out_shape, int64))


def _arg_reduce(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    dev = gpu()
    exact_int = not x.dtype.is_floating_point
    reduce = dev.reduce_axis_int if exact_int else dev.reduce_axis
    xb = _int_operand(x) if exact_int else _float_operand(x)
    if dim is None:
        out = reduce(xb, 1, x.numel(), 1, op)
        return Tensor(out, (1,) * x.ndim if keepdim else (), int64)
    d = _dim(op, dim, x.ndim)
    out = reduce(xb, numel(x.shape[:d]), x.shape[d] if x.ndim else 1, numel(x.shape[d + 1:]), op)
    shape = x.shape[:d] + ((1,) if keepdim else ()) + x.shape[d + 1:]
    return Tensor(out, shape, int64)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along dim: the fused row kernel over the last
    dim (another dim is moved last and back)."""
    x, = _autocast("softmax", x)
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
    xb = x._buf if x._buf.dtype == "f16" else _float_operand(x)  # f16 rows: the f16 row kernels
    out = Tensor(dev.softmax(xb, rows, cols), x.shape)
    return _record("softmax", out, (x,), rule("softmax", dev, out._buf, rows, cols))


def _max_detached(x: Tensor, d: int) -> Tensor:
    """x's max over dim d, kept as size 1, outside the graph (a shift that cancels out)."""
    out = gpu().reduce_axis(_float_operand(x), numel(x.shape[:d]), x.shape[d], numel(x.shape[d + 1:]), "max")
    return Tensor(out if x._buf.dtype != "f16" else gpu().cast(out, "f16"), x.shape[:d] + (1,) + x.shape[d + 1:])


def _in_float32(fn):
    """A composite op that runs a float16 input in float32 and rounds its result to float16
    once, as torch's half kernels do (f32 math inside), rather than after every step.
    Under autocast the op's policy (amp.FLOAT32) applies first: the result stays float32."""
    @functools.wraps(fn)
    def run(x, *args, **kwargs):
        x, = _autocast(fn.__name__, x)
        if x.dtype is not float16:
            return fn(x, *args, **kwargs)
        out = fn(_cast(x, float32), *args, **kwargs)
        return _cast(out, float16) if out.dtype is float32 else out
    return run


@_in_float32
def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - max - log(sum(exp(x - max))) along dim (numerically stable)."""
    d = _dim("log_softmax", dim, x.ndim)
    if x.ndim == 0:
        return log_softmax(x.reshape(1), 0).reshape(())
    if x.numel() == 0:  # empty rows (or no rows): an empty result, as torch
        return x.float().clone()
    shifted = x - _max_detached(x, d)
    return shifted - shifted.exp().sum(d, keepdim=True).log()


@_in_float32
def logsumexp(x: Tensor, dim, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over dim, computed around the max (numerically stable)."""
    d = _dim("logsumexp", dim, x.ndim)
    if x.shape[d] == 0:  # the log of an empty sum: -inf, as torch
        out = linked_empty(full(x.shape[:d] + (1,) + x.shape[d + 1:], -math.inf), x)
        return out if keepdim else out.squeeze(d)
    peak = _max_detached(x, d)
    # An infinite max shifts by 0 instead: inf - inf would be NaN where torch gives +-inf.
    peak = where(peak.abs() == math.inf, 0.0, peak)
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


def _torch_contiguous(shape, strides) -> bool:
    """torch's is_contiguous: every dim of size > 1 has the row-major stride."""
    expected = 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def _view_strides(shape, strides, new_shape):
    """The strides of `new_shape` viewing memory laid out as (shape, strides), or None when
    no view exists (torch's rule: each group of old dims merged or split must be
    contiguous within itself). Size-1 dims take any stride."""
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
    return tuple(out)


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
    permuted = tuple((x._torch_strides or strides)[d] for d in dims)
    out._torch_strides = None if _torch_contiguous(shape, permuted) else permuted
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
    torch_strides = tuple([0] * pad + [0 if old == 1 and new != 1 else st for old, new, st in zip(
        x.shape, shape[pad:], x._torch_strides or contiguous_strides(x.shape))])
    out._torch_strides = None if _torch_contiguous(shape, torch_strides) else torch_strides
    return _record("expand", out, (x,), rule("expand", dev, x.shape, shape))


def _expand_index(x: Tensor, index) -> tuple:
    """An index as a tuple of items that covers x's dims: ints, slices, None, and integer
    Tensors (lists and arrays become tensors; a bool mask over k dims becomes the k integer
    tensors of its nonzero positions, read back as torch does); Ellipsis filled in."""
    if not isinstance(index, tuple):
        index = (index,)
    items = []
    for item in index:
        if isinstance(item, (list, np.ndarray)) or (isinstance(item, Tensor)):
            t = item if isinstance(item, Tensor) else tensor(np.asarray(item))
            if t.dtype is bool_:
                if t.ndim == 0:
                    raise IndexError("indexing: a 0-d bool index is not supported")
                items.append(_MaskDims([tensor(p.astype(np.int64)) for p in np.nonzero(t.numpy())]))
                continue
            if t.dtype.is_floating_point:
                raise IndexError(f"indexing: tensors used as indices must be integer or bool tensors, got {t.dtype}")
            items.append(t)
        elif item is None or item is Ellipsis or isinstance(item, slice):
            items.append(item)
        elif isinstance(item, (bool, np.bool_)):
            raise IndexError("indexing: a bool scalar index is not supported")
        else:
            try:
                items.append(int(item))
            except TypeError:
                raise IndexError(f"indexing: unsupported index {item!r}") from None
    flat = []
    for item in items:
        flat.extend(item.tensors if isinstance(item, _MaskDims) else [item])
    n_ellipsis = sum(i is Ellipsis for i in flat)
    if n_ellipsis > 1:
        raise IndexError("indexing: an index can only have a single ellipsis")
    n_real = sum(i is not None and i is not Ellipsis for i in flat)
    if n_real > x.ndim:
        raise IndexError(f"indexing: too many indices for a tensor of {x.ndim} dims")
    if n_ellipsis:
        pos = next(k for k, item in enumerate(flat) if item is Ellipsis)  # not .index: Tensor == is elementwise
        flat = flat[:pos] + [slice(None)] * (x.ndim - n_real) + flat[pos + 1:]
    else:
        flat = flat + [slice(None)] * (x.ndim - n_real)
    return tuple(flat)


class _MaskDims:
    """The index tensors a bool mask expands to (they cover consecutive dims)."""

    def __init__(self, tensors):
        self.tensors = list(tensors)


def _basic_view(x: Tensor, items) -> tuple[tuple, list, int]:
    """(shape, strides, offset) of the view that ints, slices and None select."""
    base = contiguous_strides(x.shape)
    offset, shape, strides, d = 0, [], [], 0
    for item in items:
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
    return positions if positions.shape == out_shape else expand(positions, out_shape)


def _has_tensor_items(items) -> bool:
    return any(isinstance(item, Tensor) for item in items)


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
    out = Tensor(dev.strided_gather(x._buf, shape, strides, offset), shape, x.dtype)

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


_inplace_keys = itertools.count(-1, -1)  # engine keys of in-place results (ids are positive)


def _graph_ancestors(root: Tensor, stop: Tensor):
    """Every tensor with an entry behind root, not walking through `stop`."""
    seen, stack = set(), [root]
    while stack:
        t = stack.pop()
        if id(t) in seen or t is stop or t._entry is None:
            continue
        seen.add(id(t))
        yield t
        stack.extend(t._parents)


def _inplace(x: Tensor, result: Tensor, op: str) -> Tensor:
    """Make x hold result's values, as torch's in-place ops do.

    Outside a graph the values are written into x's own buffer, so tensors sharing it
    (`.data`, `.detach()`, views) see them. When x or the result is in a graph, x
    becomes a new node (a fresh engine key, the result's buffer and entry) and its old
    value lives on in a stand-in node that every earlier use of x is pointed at, so
    gradients reach both; the old buffer stays untouched for their backward rules."""
    if result.shape != x.shape:
        raise ValueError(f"{op}: the result has shape {result.shape}, which cannot be written into "
                         f"a tensor of shape {x.shape}")
    if result.dtype is not x.dtype:
        if result.dtype.is_floating_point and not x.dtype.is_floating_point:
            raise ValueError(f"{op}: result type {result.dtype} can't be cast to the tensor's dtype {x.dtype} in place")
        result = _cast(result, x.dtype)
    grad_on = is_grad_enabled()
    if grad_on and x.requires_grad and x._entry is None:
        raise RuntimeError(f"{op}: a leaf tensor that requires grad is used in an in-place operation; "
                           f"do it under torch.no_grad() or on .data")
    if not (grad_on and (result._entry is not None or x._entry is not None)):
        gpu().copy(result._buf, x._buf)
        x._host = None
        return x
    old = Tensor(x._buf, x.shape, x.dtype, x.requires_grad)
    old._entry, old._parents, old._key = x._entry, x._parents, x._key
    for t in _graph_ancestors(result, stop=x):  # earlier uses of x read its old value
        if any(p is x for p in t._parents):
            t._parents = tuple(old if p is x else p for p in t._parents)
    x._key = next(_inplace_keys)
    x._buf, x._host = result._buf, None
    if result._entry is not None:
        result._entry.output = x._key
        x._entry, x._parents, x.requires_grad = result._entry, result._parents, True
    else:
        x._entry, x._parents, x.requires_grad = None, (), False
    return x


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
    return index


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


def where(condition, a=None, b=None) -> Tensor:
    """a where condition is nonzero, else b (broadcast together); where(condition) alone is
    nonzero(condition, as_tuple=True)."""
    if a is None and b is None:
        return nonzero(condition, as_tuple=True)
    out_dtype = _result_dtype(a, b)
    condition, a, b = _to_tensor(condition), _to_tensor(a), _to_tensor(b)
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
    out = Tensor(dev.where(cond_full, a_full, b_full), shape)

    return _record("where", out, (a, b),
                   rule("where", dev, cond_full, a.shape, b.shape, shape, needs=(a.requires_grad, b.requires_grad)))


def _as_float(t: Tensor) -> Tensor:
    return t if t.dtype.is_floating_point else t.float()


# ===================================================================== matmul

def _matmul_int(a: Tensor, b: Tensor, m: int, n: int, k: int) -> Tensor:
    """Exact integer matmul of (batched) matrices; mixing integer and float operands is an
    error, as in torch."""
    if not (_is_int(a.dtype) and _is_int(b.dtype)):
        raise ValueError(f"matmul: both operands must have the same kind of dtype, got {a.dtype} and {b.dtype} "
                         f"(convert one with .float() or .long())")
    batch_shape = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2])
    a_full = a if a.shape[:-2] == batch_shape else expand(a, batch_shape + (m, k))
    b_full = b if b.shape[:-2] == batch_shape else expand(b, batch_shape + (k, n))
    buf = gpu().matmul_int(a_full._buf, b_full._buf, numel(batch_shape), m, n, k)
    return Tensor(buf, batch_shape + (m, n), promote(a.dtype, b.dtype))


def matmul(a: Tensor, b: Tensor) -> Tensor:
    """torch.matmul: 1-D/2-D/batched with broadcast batch dims (float16 operands: f16
    stored, summed in f32, as are their gradients)."""
    a, b = _autocast("matmul", _to_tensor(a), _to_tensor(b))
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
    if not (a.dtype.is_floating_point and b.dtype.is_floating_point):
        return _matmul_int(a, b, m, n, k)
    if a.dtype is not b.dtype:
        raise ValueError(f"matmul: expected both operands to have the same dtype, got {a.dtype} and {b.dtype}")
    if 0 in a.shape or 0 in b.shape:  # empty products: an empty result, or zeros when k == 0
        out_shape = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2]) + (m, n)
        return linked_empty(zeros(out_shape) if numel(out_shape) else Tensor(gpu().empty(0), out_shape), a, b)
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


# ===================================================================== composite ops (torch names)

SortResult = namedtuple("SortResult", ["values", "indices"])


def _moved_last(x: Tensor, dim: int, op: str) -> tuple[Tensor, int]:
    d = _dim(op, dim, x.ndim)
    return (x if d == x.ndim - 1 else x.transpose(d, -1)), d


def _moved_back(t: Tensor, d: int, ndim: int) -> Tensor:
    return t if d == ndim - 1 else t.transpose(d, -1)


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


_CUMSUM_BLOCK = 256


# M. Giles' single-precision erfinv: p(w - 2.5) for w = -log(1 - x^2) < 5, else q(sqrt(w) - 3); erfinv = p x
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


# Lanczos' coefficients for g = 7, n = 9 (Gamma(z + 1) = sqrt(2 pi) t^(z + 1/2) e^-t A(z), t = z + 7.5)
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)


def _sin_cos_pi(r: Tensor) -> tuple[Tensor, Tensor]:
    """(sin(pi r), cos(pi r)) for |r| <= 1/2 by their Taylor series (to x^13 and x^12, under 1e-9
    there): relative accuracy down to r near 0 whatever a driver's sin and cos give (NVIDIA's
    are approximations good to an absolute 1e-6 or so, too coarse for the reflections' small
    sines near the poles)."""
    x = r * math.pi
    x2 = x * x
    sin = x * (1 - x2 / 6 * (1 - x2 / 20 * (1 - x2 / 42 * (1 - x2 / 72 * (1 - x2 / 110 * (1 - x2 / 156))))))
    cos = 1 - x2 / 2 * (1 - x2 / 12 * (1 - x2 / 30 * (1 - x2 / 56 * (1 - x2 / 90 * (1 - x2 / 132)))))
    return sin, cos


def _lgamma_values(x: Tensor) -> Tensor:
    small = x < 0.5
    z = where(small, 1 - x, x) - 1  # Lanczos at z + 1: x, or 1 - x for the reflection
    series = full(x.shape, _LANCZOS[0], dtype=x.dtype)
    for i, c in enumerate(_LANCZOS[1:], 1):
        series = series + c / (z + i)
    t = z + 7.5
    direct = 0.9189385332046727 + (z + 0.5) * t.log() - t + series.log()
    # |sin(pi x)| = |sin(pi r)| for r = x - round(x), exact in float32: near the poles pi * x itself
    # would carry an ulp of x into the small sine
    sine = _sin_cos_pi(where(small, x - x.round(), 0.5))[0]
    reflected = (math.pi / sine.abs()).log() - direct
    out = where(small, reflected, direct)
    out = where((x == 1) | (x == 2), 0.0, out)  # exact zeros there, as libm's (log 1! = log 0! = 0)
    return where(((x <= 0) & (x == x.floor())) | x.isinf(), math.inf, out)


def _digamma_values(x: Tensor) -> Tensor:
    negative = x < 0
    y = where(negative, 1 - x, x)
    shifted = 0.0
    for k in range(6):  # digamma(y) = digamma(y + 6) - sum 1 / (y + k); 1 / y keeps -0's sign (+inf there)
        shifted = shifted + (1 / y if k == 0 else 1 / (y + k))
    w = y + 6
    inv2 = 1 / (w * w)
    series = w.log() - 0.5 / w - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    psi = series - shifted
    sine, cosine = _sin_cos_pi(where(negative, x - x.round(), 0.5))  # tan has period pi
    out = where(negative, psi - math.pi * cosine / sine, psi)
    return where(negative & (x == x.floor()), math.nan, out)


@functools.lru_cache(maxsize=None)
def _lgamma_function():
    """lgamma as an autograd.Function (its gradient digamma(x) exactly as torch's)."""
    from .custom_function import Function

    class Lgamma(Function):
        @staticmethod
        def forward(ctx, x):
            wide = x if x.dtype is float32 else _cast(x, float32)
            ctx.save_for_backward(wide)
            y = _lgamma_values(wide)
            return _cast(y, float16) if x.dtype is float16 else y

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * _digamma_values(x)
    return Lgamma


@functools.lru_cache(maxsize=None)
def _erfinv_function():
    """erfinv as an autograd.Function (made once; custom_function imports this module)."""
    from .custom_function import Function

    class Erfinv(Function):
        @staticmethod
        def forward(ctx, x):
            y = _erfinv_values(x if x.dtype is float32 else _cast(x, float32))  # f16 computed in f32
            if x.dtype is float16:
                y = _cast(y, float16)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * ((y * y).exp() * (math.sqrt(math.pi) / 2))
    return Erfinv


def _erfinv_values(x: Tensor) -> Tensor:
    w = -((1 - x) * (1 + x)).log()

    def horner(coefficients, t):
        p = full(t.shape, coefficients[0], dtype=t.dtype)
        for c in coefficients[1:]:
            p = p * t + c
        return p
    central = horner(_ERFINV_CENTRAL, w - 2.5)
    tail = horner(_ERFINV_TAIL, where(w < 5, 5.0, w).sqrt() - 3)  # w < 5 takes the central form
    y = where(w < 5, central, tail) * x
    return where(x.abs() == 1, x * math.inf, y)  # the polynomials give no infinity at +-1


def _cumulative_extreme(op: str, x: Tensor, dim: int, compare: str):
    """cummax / cummin: the running extreme's positions found without a graph by log2(n)
    doubling steps (a later segment's (value, position) wins where its value compares `ge`
    (`le`) or is NaN: associative, so the same as the left-to-right scan), then the values
    gathered from x (their gradient lands on those positions, as torch's)."""
    if x.ndim == 0:
        _dim(op, dim, 1)
        return MaxResult(x * 1, zeros((), dtype=int64))
    d = _dim(op, dim, x.ndim)
    n = x.shape[d]
    with no_grad():
        value = movedim(x.detach(), d, -1)
        index = expand(arange(n, dtype=int64), value.shape) if n else zeros(value.shape, dtype=int64)
        step = 1
        while step < n:
            left_v, right_v = value[..., :n - step], value[..., step:]
            left_i, right_i = index[..., :n - step], index[..., step:]
            later = _compare(compare, right_v, left_v)
            if x.dtype.is_floating_point:
                later = later | right_v.isnan()
            value = cat([value[..., :step], where(later, right_v, left_v)], -1)
            index = cat([index[..., :step], where(later, right_i, left_i)], -1)
            step *= 2
        index = movedim(index, -1, d)
    return MaxResult(gather(x, d, index), index)


def cumsum(x: Tensor, dim: int, dtype=None) -> Tensor:
    """Running sums along dim: a matmul with a triangle of ones per block of 256 and a
    recursive running sum of the block totals (exact on integers; bool sums to int64)."""
    if dtype is not None:
        x = x.to(dtype)
    elif x.dtype is bool_ or x.dtype is int32:
        x = _cast(x, int64)
    if x.ndim == 0:
        return x.clone()
    moved, d = _moved_last(x, dim, "cumsum")
    n = moved.shape[-1]
    if n <= _CUMSUM_BLOCK:
        triangle = tensor(np.triu(np.ones((n, n), np.int64)), dtype=moved.dtype)
        return _moved_back(matmul(moved, triangle), d, x.ndim)
    blocks = -(-n // _CUMSUM_BLOCK)
    pad = blocks * _CUMSUM_BLOCK - n
    padded = cat([moved, zeros(moved.shape[:-1] + (pad,), dtype=moved.dtype)], -1) if pad else moved
    grouped = padded.reshape(moved.shape[:-1] + (blocks, _CUMSUM_BLOCK))
    inner = cumsum(grouped, -1)
    totals = inner[..., -1]
    offsets = cumsum(totals, -1) - totals
    out = (inner + offsets.unsqueeze(-1)).reshape(moved.shape[:-1] + (blocks * _CUMSUM_BLOCK,))
    return _moved_back(out[..., :n] if pad else out, d, x.ndim)


def multinomial(probs: Tensor, num_samples: int, replacement: bool = False, generator=None) -> Tensor:
    """Samples of category indices (int64) from each row of non-negative weights. Drawn on
    the host from anygpu's generator: the same seed gives the same draws, but not torch's."""
    weights = probs.numpy().astype(np.float64)
    rows = weights.reshape(-1, weights.shape[-1]) if weights.ndim else None
    if rows is None or weights.ndim > 2:
        raise ValueError(f"multinomial: expects a 1-D or 2-D tensor of weights, got shape {probs.shape}")
    if (rows < 0).any() or not np.isfinite(rows).all():
        raise ValueError("multinomial: weights must be finite and non-negative")
    if not replacement and num_samples > rows.shape[1]:
        raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement from "
                         f"{rows.shape[1]} categories")
    rng = _generator_rng(generator)
    draws = []
    for row in rows:
        total = row.sum()
        if total <= 0:
            raise ValueError("multinomial: a row of weights sums to zero")
        draws.append(rng.choice(row.size, size=num_samples, replace=replacement, p=row / total))
    out = np.array(draws, dtype=np.int64)
    return tensor(out if weights.ndim == 2 else out[0])


def randperm(n: int, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    placement.check_device("randperm", device)
    _check_fits("randperm", int(n))
    if generator is not None and hasattr(generator, "manual_seed"):  # an anygpu.Generator: torch's order
        from .generator import randperm as mersenne_randperm
        order = np.asarray(mersenne_randperm(int(n), generator), dtype=np.int64)
    else:
        order = _generator_rng(generator).permutation(int(n))
    return tensor(order, dtype=int64 if dtype is None else dtype)


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


def einsum(equation: str, *operands) -> Tensor:
    """torch.einsum for explicit or implicit outputs, one letter per dim, no repeated
    letters within an operand: pairs are contracted by one (batched) matmul each."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    equation = equation.replace(" ", "")
    lhs, arrow, rhs = equation.partition("->")
    inputs = lhs.split(",")
    if len(inputs) != len(operands):
        raise ValueError(f"einsum: the equation names {len(inputs)} operands, got {len(operands)}")
    if "." in equation:
        raise ValueError("einsum: ellipsis ('...') is not supported; name every dim")
    for spec, t in zip(inputs, operands):
        if len(spec) != t.ndim or len(set(spec)) != len(spec):
            raise ValueError(f"einsum: operand spec {spec!r} does not name each of the {t.ndim} dims "
                             f"of shape {t.shape} exactly once")
    if not arrow:
        counts = {c: lhs.count(c) for c in lhs if c != ","}
        rhs = "".join(sorted(c for c, n in counts.items() if n == 1))
    current, spec = operands[0], inputs[0]
    for k in range(1, len(operands)):
        later = set(rhs) | set("".join(inputs[k + 1:]))
        current, spec = _einsum_pair(current, spec, operands[k], inputs[k], later)
    summed = [i for i, c in enumerate(spec) if c not in rhs]
    if summed:
        current = current.sum(tuple(summed))
        spec = "".join(c for c in spec if c in rhs)
    if sorted(spec) != sorted(rhs):
        raise ValueError(f"einsum: output {rhs!r} names dims that no operand has")
    return current.permute(tuple(spec.index(c) for c in rhs)) if spec != rhs else current


def _einsum_pair(a: Tensor, sa: str, b: Tensor, sb: str, keep: set) -> tuple[Tensor, str]:
    """Contract two operands: dims both have and `keep` needs are batch dims, dims both have
    that nothing later needs are summed by the matmul; the rest stay."""
    a, sa = _sum_own(a, sa, sb, keep)
    b, sb = _sum_own(b, sb, sa, keep)
    batch = [c for c in sa if c in sb and c in keep]
    contract = [c for c in sa if c in sb and c not in keep]
    left = [c for c in sa if c not in sb]
    right = [c for c in sb if c not in sa]
    size = {c: n for s, t in ((sa, a), (sb, b)) for c, n in zip(s, t.shape)}
    for c in batch + contract:
        if dict(zip(sa, a.shape))[c] != dict(zip(sb, b.shape))[c]:
            raise ValueError(f"einsum: dim {c!r} has size {dict(zip(sa, a.shape))[c]} in one operand and "
                             f"{dict(zip(sb, b.shape))[c]} in the other")
    a3 = a.permute(tuple(sa.index(c) for c in batch + left + contract)).reshape(
        (numel(size[c] for c in batch), numel(size[c] for c in left), numel(size[c] for c in contract)))
    b3 = b.permute(tuple(sb.index(c) for c in batch + contract + right)).reshape(
        (numel(size[c] for c in batch), numel(size[c] for c in contract), numel(size[c] for c in right)))
    out = matmul(a3, b3).reshape(tuple(size[c] for c in batch + left + right))
    return out, "".join(batch + left + right)


def _sum_own(t: Tensor, spec: str, other: str, keep: set) -> tuple[Tensor, str]:
    """Sum the dims only this operand has and nothing later needs."""
    own = [i for i, c in enumerate(spec) if c not in keep and c not in other]
    if not own:
        return t, spec
    return t.sum(tuple(own)), "".join(c for i, c in enumerate(spec) if i not in own)


def _scaled_sum(input, product: Tensor, beta, alpha) -> Tensor:
    """beta * input + alpha * product (addmm / baddbmm)."""
    scaled = product if alpha == 1 else product * alpha
    if beta == 0:
        return scaled
    return scaled + (input if beta == 1 else _to_tensor(input) * beta)


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


def prod(x: Tensor, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """The product over dim (everything by default) by pairwise halving: log2(n) multiplies,
    exact for zeros and negative values, differentiable through each multiply."""
    if dtype is not None:
        x = x.to(dtype)
    elif x.dtype is bool_ or x.dtype is int32:
        x = _cast(x, int64)
    if dim is None:
        out = prod(x.reshape(-1), 0)
        return out.reshape((1,) * x.ndim) if keepdim else out
    moved, d = _moved_last(x, dim, "prod")
    out = moved
    while out.shape[-1] > 1:
        size = out.shape[-1]
        half = size // 2
        paired = out[..., :half] * out[..., half:2 * half]
        out = cat([paired, out[..., 2 * half:]], -1) if size % 2 else paired
    if out.shape[-1] == 0:
        out = ones(out.shape[:-1] + (1,), dtype=out.dtype)
    out = _moved_back(out, d, x.ndim)
    return out if keepdim else out.squeeze(d)


def cumprod(x: Tensor, dim: int, dtype=None) -> Tensor:
    """Running products along dim by log2(n) doubling steps (Hillis-Steele), differentiable."""
    if dtype is not None:
        x = x.to(dtype)
    elif x.dtype is bool_ or x.dtype is int32:
        x = _cast(x, int64)
    moved, d = _moved_last(x, dim, "cumprod")
    n = moved.shape[-1] if moved.ndim else 1
    out, shift = moved, 1
    while shift < n:
        lead = ones(out.shape[:-1] + (shift,), dtype=out.dtype)
        out = out * cat([lead, out[..., :n - shift]], -1)
        shift *= 2
    return _moved_back(out, d, x.ndim) if x.ndim else out


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


def cdist(x1: Tensor, x2: Tensor, p: float = 2.0) -> Tensor:
    """Pairwise p-norm distances between the rows of x1 [.., P, M] and x2 [.., R, M]."""
    diff = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return diff.norm(p, dim=-1)


def cartesian_prod(*tensors) -> Tensor:
    grids = meshgrid(*tensors, indexing="ij")
    return stack([g.reshape(-1) for g in grids], 1) if len(tensors) > 1 else tensors[0]


def autograd_grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
                  allow_unused=None, is_grads_batched: bool = False, materialize_grads: bool = False):
    """torch.autograd.grad: the gradients of outputs with respect to inputs, returned as a
    tuple without touching any `.grad` (higher-order gradients are not supported)."""
    if create_graph or is_grads_batched:
        raise ValueError("autograd.grad: create_graph / is_grads_batched are not supported by anygpu")
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outputs) if grad_outputs is None else [grad_outputs]
    saved = [(t.grad, t._retain) for t in inputs]
    try:
        for t in inputs:
            t.grad, t._retain = None, True
        with enable_grad():
            total = None
            for out, weight in zip(outputs, grad_outputs):
                term = out.sum() if weight is None else (out * weight).sum()
                total = term if total is None else total + term
        total.backward(retain_graph=retain_graph)
        grads = [t.grad for t in inputs]
    finally:
        for t, (grad, retain) in zip(inputs, saved):
            t.grad, t._retain = grad, retain
    for k, g in enumerate(grads):
        if g is None:
            if materialize_grads:
                grads[k] = zeros_like(inputs[k])
            elif not allow_unused:
                raise RuntimeError("autograd.grad: one of the differentiated tensors appears not to have been "
                                   "used in the graph (pass allow_unused=True)")
    return tuple(grads)
