"""In-place ops: how a tensor takes a new value, in and out of a graph."""

from __future__ import annotations


import numpy as np


from ..autograd.rules import backward as rule
from ..ops import gpu
from ..ops.nd import contiguous_strides

from .core import _NP_DTYPE, Tensor
from .grad_mode import is_grad_enabled
from .elementwise import _cast
from .views import check_multi_output, counts_versions
from .recording import _attach, _inplace_keys, _record, _written_in_place




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
    gradients reach both; the old buffer stays untouched for their backward rules.
    On a view the write goes to its base (`_inplace_view`)."""
    if result.shape != x.shape:
        raise ValueError(f"{op}: the result has shape {result.shape}, which cannot be written into "
                         f"a tensor of shape {x.shape}")
    if result.dtype is not x.dtype:
        if result.dtype.is_floating_point and not x.dtype.is_floating_point:
            raise ValueError(f"{op}: result type {result.dtype} can't be cast to the tensor's dtype {x.dtype} in place")
        result = _cast(result, x.dtype)
    if x._base is not None:
        return _inplace_view(x, result, op)
    grad_on = is_grad_enabled()
    if grad_on and x.requires_grad and x._entry is None:
        raise RuntimeError(f"{op}: a leaf Variable that requires grad is being used in an in-place operation "
                           f"(do it under torch.no_grad() or on .data)")
    x._version += 1
    _written_in_place(result, x)
    if not (grad_on and (result._entry is not None or x._entry is not None)):
        gpu().copy(result._buf, x._buf)
        x._host = None
        return x
    _rebind(x, result, x._buf)
    x._buf = result._buf
    return x


def _rebind(x: Tensor, result: Tensor, old_buf) -> None:
    """x becomes a new graph node holding result's entry; a stand-in with x's old identity
    (over `old_buf`) takes x's place among result's ancestors, which read the old value."""
    old = Tensor(old_buf, x.shape, x.dtype, x.requires_grad)
    old._entry, old._parents, old._key = x._entry, x._parents, x._key
    for t in _graph_ancestors(result, stop=x):  # earlier uses of x read its old value
        if any(p is x for p in t._parents):
            t._parents = tuple(old if p is x else p for p in t._parents)
    x._key = next(_inplace_keys)
    x._host = None
    if result._entry is not None:
        result._entry.output = x._key
        x._entry, x._parents, x.requires_grad = result._entry, result._parents, True
    else:
        x._entry, x._parents, x.requires_grad = None, (), False


def _inplace_view(x: Tensor, result: Tensor, op: str) -> Tensor:
    """An in-place op on a view writes its base's buffer. In a graph (torch's CopySlices):
    the base becomes `base with the view's elements replaced by result`, recorded with the
    setitem rule, and the view becomes a view of that new base."""
    base = x._base
    strides, offset = x._view if x._view is not None else (contiguous_strides(x.shape), 0)
    if any(st == 0 and n > 1 for n, st in zip(x.shape, strides)):
        raise RuntimeError(f"{op}: unsupported operation: more than one element of the written-to tensor refers to "
                           f"a single memory location. Please clone() the tensor before performing the operation.")
    grad_on = is_grad_enabled()
    if grad_on and x.requires_grad:
        check_multi_output(x, op)
    if grad_on and x.requires_grad and base.requires_grad and base._entry is None:
        raise RuntimeError(f"{op}: a view of a leaf Variable that requires grad is being used in an in-place "
                           f"operation.")
    if counts_versions(x):
        base._version += 1
        _written_in_place(result, base)
    dev = gpu()
    if not (grad_on and (result._entry is not None or x.requires_grad)):
        if x._view is None:
            dev.copy(result._buf, base._buf)
            x._buf = base._buf
        else:
            dev.strided_scatter(result._buf, base._buf, x.shape, strides, offset)
        base._host = x._host = None
        return x
    written = dev.copy(base._buf)
    dev.strided_scatter(result._buf, written, x.shape, strides, offset)
    new_base = _record("copy_slices", Tensor(written, base.shape, base.dtype), (base, result),
                       rule("setitem", dev, x.shape, strides, offset))
    _rebind(base, new_base, base._buf)
    base._buf = new_base._buf
    stand_in = Tensor(None, x.shape, x.dtype, x.requires_grad)  # x's old identity, for earlier uses of x
    stand_in._entry, stand_in._parents, stand_in._key = x._entry, x._parents, x._key
    for t in _graph_ancestors(base, stop=x):
        if any(p is x for p in t._parents):
            t._parents = tuple(stand_in if p is x else p for p in t._parents)
    x._key = next(_inplace_keys)
    x._entry, x._parents, x.requires_grad, x._host = None, (), False, None
    _attach(op, x, (base,), rule("getitem", dev, base.numel(), x.shape, strides, offset))
    x._version = base._version
    if x._view is None:
        x._buf = base._buf
    return x


def write_host(t: Tensor, values: np.ndarray) -> None:
    """Overwrite t's elements with host `values` (t's shape), outside any graph: into t's
    buffer, or for a strided view into its base's buffer."""
    dev = t._dev
    if t._view is None:
        dev.write(t._buf, values)
    else:
        base = t._base
        strides, offset = t._view
        source = dev.upload(np.ascontiguousarray(values, dtype=_NP_DTYPE[t.dtype]).reshape(-1), base._buf.dtype)
        dev.strided_scatter(source, base._buf, t.shape, strides, offset)
        base._version += 1
        base._host = None
    t._host = None
