"""Autograd glue: attach an op's backward rule to its result (`_record`, with float16
conversions), and the graph walk backward uses."""

from __future__ import annotations

import itertools
from typing import Sequence


from ..autograd.engine import Entry
from ..autograd.rules import backward as rule
from ..dtypes import float16, float32
from ..ops import gpu

from .core import StridedView, Tensor, _is_int
from .grad_mode import is_grad_enabled


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
    computed = _stored(out) if native or name in _HALF_RULES else "f32"
    if out.dtype is float32 and _half_result(parents):
        out._buf, out.dtype = gpu().cast(out._buf, "f16"), float16
    if backward is not None:
        backward = _converting_backward(backward, computed, tuple(_stored(p) for p in parents))
    return _attach(name, out, parents, backward)


def _stored(t: Tensor) -> str:
    """The Buffer dtype of t's elements, read without realizing a view (a StridedView's
    `_buf` gathers its elements into a new Buffer: one dispatch for a dtype)."""
    return (t if t._base is None else t._base)._buf.dtype


# Ops whose forward ran on f16 Buffers and whose backward rule runs on them too (f16 stored,
# f32 math): matmul's gradients are matmuls of the f16 gradient with the f16 operands (summed
# in f32), softmax's backward reads the f16 gradient and output; linear's are matmuls and a
# row sum (in f32) of the f16 gradient; float16 attention's rule takes the f16 gradient.
_HALF_RULES = {"matmul", "bmm", "softmax", "linear", "scaled_dot_product_attention",
               # moves of values (gathers, scatters, reshapes): exact in any dtype, so an f16
               # gradient needs no round trip through f32 (two casts each)
               "reshape", "view", "contiguous", "permute", "getitem", "cat",
               # float16 convolutions run only on matrix units (ops/conv_sgmat.py; else on f32
               # copies), and so do their gradients: f16 gradient, f16 operands
               "conv2d", "conv_transpose2d"}


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


_inplace_keys = itertools.count(-1, -1)  # engine keys of in-place results and re-made views (ids are positive)


def _attach(name: str, out: Tensor, parents: Sequence[Tensor], backward) -> Tensor:
    if is_grad_enabled() and any(p.requires_grad for p in parents):
        for p in parents:
            if p._view is not None and p._version != p._base._version:  # a view read after its base changed
                parents = tuple(_view_now(q) for q in parents)
                break
        out.requires_grad = True
        out._parents = tuple(parents)
        saves = _SAVES.get(name)
        if saves is not None and backward is not None:
            backward = _version_checked(backward, name, saves(parents, out))
        out._entry = Entry(name, tuple(p._key for p in parents), out._key, backward)
    return out


def _view_now(view: Tensor) -> Tensor:
    """The operand an op records for a strided view read after its base changed in place:
    as torch, a view whose graph entry comes from the base as it is now (its values are
    read from the base anyway), so gradients reach the base's current graph. The view
    itself keeps its entry for the ops that read it before."""
    if view._view is None or view._version == view._base._version:
        return view
    base = view._base
    if not view.requires_grad or not base.requires_grad:
        return view  # a detached view, or a base outside any graph: nothing to route
    strides, offset = view._view
    now = StridedView(base, view.shape, view.dtype, strides, offset)
    now.requires_grad = True
    now._parents = (base,)
    now._entry = Entry("view", (base._key,), now._key, rule("getitem", gpu(), base.numel(), view.shape, strides, offset))
    return now


def _products(parents, out) -> list:
    """What torch's mul/matmul backward keeps: each operand whose partner needs a gradient."""
    if len(parents) != 2:
        return []
    a, b = parents
    return ([b] if a.requires_grad else []) + ([a] if b.requires_grad else [])


# The tensors torch's backward of an op saves, so that an in-place change to one of them
# before backward fails as torch's does (the version counter). Ops not listed save none
# that torch would check; the engine keeps its own copies either way.
_SAVES = {
    "mul": _products, "matmul": _products, "bmm": _products, "mm": _products,
    "div": lambda parents, out: ([parents[1]] + ([parents[0]] if parents[1].requires_grad else []))
    if len(parents) == 2 else [],
    "pow": lambda parents, out: list(parents),
    "maximum": lambda parents, out: list(parents), "minimum": lambda parents, out: list(parents),
    **{name: (lambda parents, out: [out]) for name in (
        "exp", "tanh", "sigmoid", "relu", "sqrt", "rsqrt", "reciprocal", "softmax", "log_softmax")},
    **{name: (lambda parents, out: list(parents)) for name in (
        "log", "log2", "log10", "log1p", "sin", "cos", "tan", "abs", "square", "erf", "asin", "acos", "atan",
        "sinh", "cosh", "silu", "gelu")},
}


def _version_checked(backward, name: str, saved: list):
    """backward, first checking that no tensor in `saved` changed in place since now."""
    if not saved:
        return backward
    marks = [(t, t if t._base is None else t._base) for t in saved]
    versions: list = [owner._version for _, owner in marks]  # None: no longer checked

    def run(grad_out):
        for (t, owner), version in zip(marks, versions):
            if version is not None and owner._version != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: a tensor of shape {list(t.shape)} and dtype {t.dtype}, saved by {name}, is at "
                    f"version {owner._version}; expected version {version} instead")
        return backward(grad_out)

    def written_in_place(owner) -> None:
        """The op itself was in place on `owner` (x.abs_(), x.mul_(y)): its saved value is the
        one from before, which lives on in the old buffer that _inplace leaves untouched (x
        takes the result's buffer), so later writes to x cannot change it: no longer checked
        (torch saves the original self for these too: `y.abs_(); y.mul_(3)` differentiates)."""
        for k, (_, mark) in enumerate(marks):
            if mark is owner:
                versions[k] = None
    run.written_in_place = written_in_place  # type: ignore[attr-defined]
    return run


def _written_in_place(result: Tensor, owner: Tensor) -> None:
    """Tell result's own backward (the in-place op's) that `owner`'s new version is its own write."""
    entry = result._entry
    mark = getattr(entry.backward, "written_in_place", None) if entry is not None else None
    if mark is not None:
        mark(owner)


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
