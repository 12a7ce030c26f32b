"""torch.autograd.Function: an op written in Tensor code with a hand-written backward.

``MyOp.apply(*args)`` runs ``MyOp.forward(ctx, *args)`` without recording (the ops inside
are not differentiated), then records one node whose backward calls
``MyOp.backward(ctx, *grad_outputs)`` and routes what it returns to the Tensor arguments.
The torch 2 form (``forward(*args)`` without ctx, plus ``setup_context(ctx, inputs,
output)``) works as well.

Several differentiable outputs: the graph of anygpu has one output per node, so the
outputs are cut from one packed value that the node produces; each output's gradient lands
in its part (zeros where an output got none), and backward receives one gradient per
output, zeros for the unused ones, as torch gives with materialized gradients (the
default). After ``ctx.set_materialize_grads(False)`` an output that no gradient reached
(its cut never ran in this backward pass) gets None instead, as in torch."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ops import gpu
from ..ops.nd import broadcast_shapes
from .core import Tensor
from .grad_mode import is_grad_enabled, no_grad
from .recording import _attach, sum_to_shape

__all__ = ["Function", "FunctionCtx", "once_differentiable"]


class FunctionCtx:
    """The `ctx` of a custom Function: what forward leaves for backward."""

    def __init__(self):
        self._saved: tuple = ()
        self._non_differentiable: set = set()
        self.needs_input_grad: tuple = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save Tensors or None, got {type(t).__name__}")
        self._saved = tuple(tensors)

    @property
    def saved_tensors(self) -> tuple:
        return self._saved

    def mark_non_differentiable(self, *tensors) -> None:
        self._non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        raise NotImplementedError("autograd.Function: ctx.mark_dirty (forward writing its inputs in place) is not "
                                  "supported by anygpu; return a new tensor instead")


def once_differentiable(fn):
    """torch.autograd.function.once_differentiable: anygpu's backward never records a graph
    (no higher-order gradients), so the function as it is."""
    return fn


class Function:
    """Subclass with static `forward` and `backward`; call `apply` (torch's contract)."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__name__}: custom Functions are not instantiated; call "
                           f"{type(self).__name__}.apply(...)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("autograd.Function: define a static forward(ctx, *args)")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("autograd.Function: define a static backward(ctx, *grad_outputs)")

    @classmethod
    def apply(cls, *args, **kwargs):
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        with no_grad():
            if cls.setup_context is not Function.setup_context:  # torch 2's form: forward without ctx
                output = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, output)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(output, tuple)
        outputs = (output,) if single else output
        parents = [(i, a) for i, a in enumerate(args) if isinstance(a, Tensor)]
        if not is_grad_enabled() or not any(a.requires_grad for _, a in parents):
            return output
        inputs = {id(a) for _, a in parents}
        # An input returned as it is gets a copy: the node must not rewrite the input's own graph.
        outputs = tuple(Tensor(gpu().copy(o._buf), o.shape, o.dtype) if isinstance(o, Tensor) and id(o) in inputs
                        else o for o in outputs)
        slots = [k for k, o in enumerate(outputs) if isinstance(o, Tensor) and o.dtype.is_floating_point
                 and id(o) not in ctx._non_differentiable]
        if not slots:
            return output
        shapes = [outputs[k].shape for k in slots]
        reached: set = set()  # the slots whose cut ran in the backward pass under way
        backward = _node_backward(cls, ctx, args, parents, outputs, slots, reached)
        if len(slots) == 1:
            _attach(cls.__name__ + "Backward", outputs[slots[0]], [a for _, a in parents], backward)
        else:
            outputs = _packed(cls.__name__ + "Backward", outputs, slots, shapes, [a for _, a in parents], backward,
                              reached)
        return outputs[0] if single else outputs


def _node_backward(cls, ctx, args, parents, outputs, slots, reached: set):
    """The recorded node's rule: the gradient of the differentiable outputs (one Buffer: the
    output's, or the packed parts) -> one gradient Buffer per Tensor argument. `reached`:
    the packed outputs' slots whose cut ran in this pass (every cut runs before this node)."""
    name = cls.__name__

    def run(grad_buf):
        dev = gpu()
        grads: list[Any] = []
        offset = 0
        ran = set(reached)
        reached.clear()  # the next pass (retain_graph) starts afresh
        for k, o in enumerate(outputs):
            if k not in slots:
                grads.append(None)
                continue
            n = o.numel()
            if len(slots) > 1 and not ctx.materialize_grads and k not in ran:
                grads.append(None)  # no gradient reached this output: None, as torch gives
                offset += n
                continue
            part = grad_buf if len(slots) == 1 else dev.copy(grad_buf, None, n, src_offset=offset)
            offset += n
            if part.dtype != o._buf.dtype:  # the packed parts are float32
                part = dev.cast(part, o._buf.dtype)
            grads.append(Tensor(part, o.shape, o.dtype))
        with no_grad():
            returned = cls.backward(ctx, *grads)
        returned = returned if isinstance(returned, tuple) else (returned,)
        if len(returned) < len(args) or any(g is not None for g in returned[len(args):]):
            raise RuntimeError(f"function {name}Backward returned an incorrect number of gradients "
                               f"(expected {len(args)}, got {len(returned)})")
        result = []
        for i, a in parents:
            g = returned[i]
            if g is None or not a.requires_grad:
                result.append(None)
                continue
            if not isinstance(g, Tensor):
                raise TypeError(f"function {name}Backward returned a {type(g).__name__} as the gradient of "
                                f"argument {i}; expected a Tensor or None")
            buf = g._buf
            if g.shape != a.shape:
                if g.numel() == a.numel():
                    pass  # same elements in another shape: torch reshapes such a gradient too
                elif _broadcasts_to(a.shape, g.shape):
                    buf = sum_to_shape(buf if buf.dtype in ("f32", "f64") else dev.cast(buf, "f32"), g.shape, a.shape)
                else:
                    raise RuntimeError(f"function {name}Backward returned an invalid gradient at index {i} - got "
                                       f"{list(g.shape)} but expected shape compatible with {list(a.shape)}")
            if buf.dtype != a._buf.dtype:
                buf = dev.cast(buf, a._buf.dtype)
            result.append(buf)
        return tuple(result)
    return run


def _broadcasts_to(shape, to) -> bool:
    """Whether `shape` broadcasts to `to` (so a gradient of shape `to` sums down to it)."""
    try:
        return broadcast_shapes("autograd.Function", shape, to) == tuple(to)
    except ValueError:
        return False


def _packed(name, outputs, slots, shapes, parents, backward, reached: set) -> tuple:
    """Several differentiable outputs: the node's output is a packed value standing for all of
    them (its values are never read: only its gradient, each output's part in order), and
    each output a recorded cut of it (see the module doc). The outputs are attached as they
    are (forward made them without a graph)."""
    sizes = [int(np.prod(shape, dtype=np.int64)) for shape in shapes]
    total = sum(sizes)
    packed = _attach(name, Tensor(gpu().empty(total), (total,)), parents, backward)
    last = {id(outputs[k]): k for k in slots}  # a tensor returned twice is one tensor, as in torch:
    offset = 0                                   # its gradient goes to its last slot, zeros to the others
    for k, n in zip(slots, sizes):
        if last[id(outputs[k])] == k:
            _attach("unpack", outputs[k], (packed,), _unpack_rule(total, offset, n, k, reached))
        offset += n
    return outputs


def _unpack_rule(total: int, offset: int, n: int, slot: int, reached: set):
    def run(grad_buf):
        reached.add(slot)
        dev = gpu()
        full = dev.alloc(total)
        dev.copy(grad_buf if grad_buf.dtype == "f32" else dev.cast(grad_buf, "f32"), full, n, dst_offset=offset)
        return (full,)
    return run
