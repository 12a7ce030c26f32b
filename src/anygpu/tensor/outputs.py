"""torch's keyword forms around ops and factories: `out=`, `size=`, `layout`, `pin_memory`,
`memory_format`.

`out=t` writes the result into t and returns t: t keeps its identity (and dtype: an integer
`out` refuses a float result, as torch), and is resized to the result's shape when that
differs (torch's warning when t had elements). Ops with `out=` do not record gradients, as
torch refuses them when an input requires grad. `layout` must be `torch.strided`;
`pin_memory` and `memory_format` change nothing (anygpu tensors are dense, row-major GPU
buffers; the host copies they are made from are transient).
"""

from __future__ import annotations

import functools
import warnings

from .core import Tensor
from .grad_mode import is_grad_enabled, no_grad

__all__ = ["write_out", "with_out", "factory", "check_layout", "memory_format", "contiguous_format",
           "channels_last", "channels_last_3d", "preserve_format"]


class memory_format:
    """torch.memory_format: accepted by `.to`, `.contiguous`, the factories and `*_like`;
    every anygpu tensor is stored row-major whatever is asked."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"torch.{self.name}"


contiguous_format = memory_format("contiguous_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")
preserve_format = memory_format("preserve_format")


def check_layout(op: str, layout) -> None:
    """torch.strided (or None) is the only layout a dense factory makes."""
    if layout is None or getattr(layout, "name", None) == "strided":
        return
    raise ValueError(f"{op}: layout must be torch.strided for a dense tensor, got {layout!r}")


def _check_memory_format(op: str, value) -> None:
    if value is not None and not isinstance(value, memory_format):
        raise ValueError(f"{op}: memory_format must be a torch.memory_format such as torch.contiguous_format, "
                         f"got {value!r}")


def write_out(op: str, result, out, warn_resize: bool = True):
    """`result`, or with `out` given: result's values written into out (see the module
    docstring); a tuple result goes into a tuple of outs. Factories resize without a warning."""
    if out is None:
        return result
    if isinstance(result, tuple):
        if not isinstance(out, (tuple, list)) or len(out) != len(result):
            raise ValueError(f"{op}: out must be a tuple of {len(result)} tensors, got {type(out).__name__}")
        written = tuple(write_out(op, r, o, warn_resize) for r, o in zip(result, out))
        return type(result)(*written) if hasattr(result, "_fields") else written
    if not isinstance(out, Tensor):
        raise ValueError(f"{op}: argument 'out' must be a Tensor, got {type(out).__name__}")
    if not isinstance(result, Tensor):
        raise ValueError(f"{op}: this op has no out= form (its result is a {type(result).__name__})")
    if is_grad_enabled() and (result.requires_grad or out.requires_grad):
        raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic differentiation, "
                           f"but one of the arguments requires grad.")
    if result.dtype is not out.dtype and result.dtype.is_floating_point and not out.dtype.is_floating_point:
        raise ValueError(f"{op}: result type {result.dtype} can't be cast to the desired output type {out.dtype}")
    with no_grad():
        if out.shape != tuple(result.shape):
            if out.numel() and warn_resize:
                warnings.warn(f"{op}: an output with one or more elements was resized since it had shape "
                              f"{list(out.shape)}, which does not match the required output shape "
                              f"{list(result.shape)}. Resize it to 0 elements first to avoid this warning.",
                              UserWarning, stacklevel=3)
            if getattr(out, "_base", None) is not None:
                raise ValueError(f"{op}: out is a view of shape {out.shape}; a view cannot be resized to "
                                 f"{tuple(result.shape)}")
            fresh = (result if result.dtype is out.dtype else result.to(out.dtype)).contiguous()
            out._buf = fresh._dev.copy(fresh._buf)
            out.shape = tuple(result.shape)
            out._host = None
            for layout_slot in ("_view", "_torch_strides"):  # a new row-major buffer of its own
                if hasattr(out, layout_slot):
                    setattr(out, layout_slot, None)
            if hasattr(out, "_version"):
                out._version += 1
        else:
            out.copy_(result)
    return out


def with_out(op: str, fn):
    """fn with an `out=` keyword (see write_out)."""
    @functools.wraps(fn)
    def wrapper(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        if is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in _flat(args, kwargs)):
            raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic "
                               f"differentiation, but one of the arguments requires grad.")
        with no_grad():
            result = fn(*args, **kwargs)
        return write_out(op, result, out)
    return wrapper


def _flat(args, kwargs):
    for value in (*args, *kwargs.values()):
        if isinstance(value, (list, tuple)):
            yield from value
        else:
            yield value


def factory(variadic: bool = True, size_keyword: bool = True, takes_memory_format: bool = False):
    """A factory `fn(*size, ...)` (variadic) or `fn(size, ...)` with torch's keywords: `size=`
    (size_keyword: unless fn takes it itself), `out=`, `layout`, `pin_memory`, and
    `memory_format` where torch takes it (empty and the *_like factories)."""
    def decorate(fn):
        op = fn.__name__

        @functools.wraps(fn)
        def wrapper(*args, out=None, layout=None, pin_memory: bool = False, **kwargs):
            check_layout(op, layout)
            if takes_memory_format:
                _check_memory_format(op, kwargs.pop("memory_format", None))
            size = kwargs.pop("size", None) if size_keyword else None
            if size is not None:
                if variadic and args:
                    raise ValueError(f"{op}: size given both as arguments {args} and as size={size!r}")
                args = (tuple(size) if isinstance(size, (tuple, list)) else (size,),) + args
            result = fn(*args, **kwargs)
            if kwargs.get("requires_grad") and not result.dtype.is_floating_point:
                raise ValueError(f"{op}: only float tensors can require gradients, got dtype {result.dtype}")
            return write_out(op, result, out, warn_resize=False)
        return wrapper
    return decorate
