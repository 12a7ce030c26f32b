"""float64 ops in numpy: the counterpart of every Device op for Buffers held on the host.

A float64 tensor's elements are a `runtime.host.HostBuffer` (see there for why). The
Device (ops/__init__.py) sends a call to `HOST_OPS[name]` instead of the GPU function
whenever an argument is a HostBuffer (`dispatching`). A host op has exactly its Device
method's signature and returns what the GPU op returns, computed in float64: float results
are HostBuffers, index and mask results (i32, u32, bool) GPU Buffers of the dtype the GPU
op gives. An op with no float64 counterpart refuses with a ValueError naming it.

Host ops run in Python on the calling thread: a step captured by `anygpu.compile` that
meets one stays eager (it is counted as a read)."""

from __future__ import annotations

import functools
import inspect
from typing import Callable

import numpy as np

from ...runtime.host import HostBuffer, host_values, is_host

HOST_OPS: dict[str, Callable] = {}


def host_op(name: str):
    """Register fn as the float64 counterpart of the Device method `name`."""
    def register(fn):
        HOST_OPS[name] = fn
        return fn
    return register


def f64(dev, arr) -> HostBuffer:
    """A HostBuffer of arr's values (converted to float64, flattened)."""
    return HostBuffer(dev, arr)


def values(dev, buf) -> np.ndarray:
    """buf's elements as numpy: float64 for a HostBuffer (its own array: do not modify),
    the GPU's values for others."""
    return host_values(dev, buf)


def _has_host(args, kwargs) -> bool:
    for a in args:
        if a.__class__ is HostBuffer:
            return True
        if a.__class__ in (list, tuple) and any(x.__class__ is HostBuffer for x in a):
            return True
    if kwargs:
        return _has_host(tuple(kwargs.values()), None)
    return False


_blas_checked = [False]


def _share_cores(dev) -> None:
    """On a software adapter (lavapipe runs kernels on the CPU's cores) keep NumPy's BLAS to
    one thread: its spinning worker threads and the driver's threads fought over the cores,
    and a 97x51x204 float64 product took 4 ms instead of 0.13 (2 cores, 2026-12-03). Once
    per process, through threadpoolctl where it is installed."""
    _blas_checked[0] = True
    if getattr(dev, "adapter_type", "") != "CPU":
        return
    try:
        import threadpoolctl
    except ImportError:
        return
    _share_cores.limits = threadpoolctl.threadpool_limits(limits=1, user_api="blas")  # type: ignore[attr-defined]


# Device ops whose arguments may be lists of Buffers: their wrapper looks inside sequences.
_SEQUENCE_OPS = {"unscale_check", "update_scale", "sum_squares", "scale_by", "adam_multi_step"}


def _host_call(self, name: str, args, kwargs):
    host = HOST_OPS.get(name)
    if host is None:
        raise ValueError(f"{name}: not available for float64 tensors (anygpu computes float64 "
                         f"on the host and this op has no float64 form yet); use .float()")
    if not _blas_checked[0]:
        _share_cores(self)
    recording = self._recording
    if recording is not None:
        recording.reads += 1  # host work cannot be replayed: the step stays eager
    return host(self, *args, **kwargs)


def _fast(name: str, fn: Callable) -> Callable | None:
    """A wrapper with fn's own signature that tests each argument's class, written out
    (no *args packing): every op pays this on the GPU path, about 0.2 us against 0.8 for
    the generic wrapper on a slow host core. None where fn's signature does not allow it."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    if name in _SEQUENCE_OPS or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY) for p in params):
        return None
    names = {"fn": fn, "HB": HostBuffer, "_host_call": _host_call}
    head, call, tests, starred = [], [], [], False
    for i, p in enumerate(params):
        if p.kind is p.KEYWORD_ONLY and not starred:
            head.append("*")
            starred = True
        default = ""
        if p.default is not p.empty:
            names[f"_d{i}"] = p.default
            default = f"=_d{i}"
        head.append(p.name + default)
        call.append(f"{p.name}={p.name}" if p.kind is p.KEYWORD_ONLY else p.name)
        tests.append(f"{p.name}.__class__ is HB")
    positional = [c for c in call if "=" not in c]
    keywords = [c for c in call if "=" in c]
    source = (f"def {name}(self, {', '.join(head)}):\n"
              f"    if {' or '.join(tests) or 'False'}:\n"
              f"        return _host_call(self, {name!r}, ({', '.join(positional)}{',' if positional else ''}), "
              f"dict({', '.join(keywords)}))\n"
              f"    return fn(self, {', '.join(call)})\n")
    exec(source, names)  # noqa: S102 -- our own signature, no user input
    method = functools.wraps(fn)(names[name])
    method.__wrapped__ = fn  # type: ignore[attr-defined]
    return method


def dispatching(name: str, fn: Callable) -> Callable:
    """The Device method `name`: fn, or its float64 counterpart when an argument is a HostBuffer."""
    if name != "cast":
        fast = _fast(name, fn)
        if fast is not None:
            return fast

    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        if _has_host(args, kwargs):
            return _host_call(self, name, args, kwargs)
        return fn(self, *args, **kwargs)
    method.__wrapped__ = fn  # type: ignore[attr-defined]
    if name == "cast":  # a GPU Buffer converted to float64 goes to the host too
        @functools.wraps(fn)
        def cast(self, x, dtype):
            if dtype == "f64" or x.__class__ is HostBuffer:
                return _host_call(self, "cast", (x, dtype), {})
            return fn(self, x, dtype)
        cast.__wrapped__ = fn  # type: ignore[attr-defined]
        return cast
    return method


class _Ready:
    """`read_later`'s result for a HostBuffer: the values at the time of the call."""

    __slots__ = ("_value",)

    def __init__(self, value: np.ndarray) -> None:
        self._value = value

    def result(self) -> np.ndarray:
        return self._value


class HostMemory:
    """The runtime Device's memory methods, extended to HostBuffers (mixed into ops.Device)."""

    def empty(self, n: int, dtype: str = "f32", stream_ordered: bool = True):
        if dtype == "f64":
            return HostBuffer(self, np.zeros(int(n)))
        return super().empty(n, dtype, stream_ordered)  # type: ignore[misc]

    def alloc(self, n: int, dtype: str = "f32"):
        if dtype == "f64":
            return HostBuffer(self, np.zeros(int(n)))
        return super().alloc(n, dtype)  # type: ignore[misc]

    def upload(self, data, dtype: str | None = None):
        if dtype == "f64":
            return HostBuffer(self, np.array(data, dtype=np.float64))
        return super().upload(data, dtype)  # type: ignore[misc]

    def write(self, buf, data) -> None:
        if buf.__class__ is HostBuffer:
            arr = np.asarray(data, dtype=np.float64).reshape(-1)
            if arr.size != buf.len:
                raise ValueError(f"write: buffer has {buf.len} elements, data has {arr.size}")
            buf.arr[...] = arr
            return
        super().write(buf, data)  # type: ignore[misc]

    def copy(self, src, dst=None, n: int | None = None, src_offset: int = 0, dst_offset: int = 0):
        if src.__class__ is HostBuffer or dst.__class__ is HostBuffer:
            if not (src.__class__ is HostBuffer and (dst is None or dst.__class__ is HostBuffer)):
                raise ValueError(f"copy: {src.dtype} elements cannot be copied into a "
                                 f"{'new' if dst is None else dst.dtype} buffer")
            n = src.len - src_offset if n is None else int(n)
            if dst is None:
                dst = HostBuffer(self, np.zeros(n))
            if src_offset + n > src.len or dst_offset + n > dst.len or min(src_offset, dst_offset, n) < 0:
                raise ValueError(f"copy: range of {n} elements from {src_offset} (of {src.len}) "
                                 f"to {dst_offset} (of {dst.len}) is out of bounds")
            dst.arr[dst_offset:dst_offset + n] = src.arr[src_offset:src_offset + n]
            return dst
        return super().copy(src, dst, n, src_offset, dst_offset)  # type: ignore[misc]

    def read(self, buf):
        if buf.__class__ is HostBuffer:
            if self._recording is not None:  # type: ignore[attr-defined]
                self._recording.reads += 1  # type: ignore[attr-defined]
            return buf.arr.copy()
        return super().read(buf)  # type: ignore[misc]

    def read_later(self, buf):
        if buf.__class__ is HostBuffer:
            return _Ready(self.read(buf))
        return super().read_later(buf)  # type: ignore[misc]


from . import core as _core  # noqa: E402,F401 — registers casts, strided copies, where
from . import math as _math  # noqa: E402,F401 — elementwise, reductions, matmul, softmax, gather, sort, dropout
from . import nn as _nn  # noqa: E402,F401 — attention, convolutions, norms, losses, optimizers, pooling

__all__ = ["HOST_OPS", "HostBuffer", "HostMemory", "dispatching", "f64", "host_op", "is_host", "values"]
