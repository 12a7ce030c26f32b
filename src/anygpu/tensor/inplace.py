"""In-place ops: how a tensor takes a new value, in and out of a graph."""

from __future__ import annotations

import itertools


from ..ops import gpu

from .core import Tensor
from .grad_mode import is_grad_enabled
from .elementwise import _cast


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
