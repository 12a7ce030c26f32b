"""torch.autograd.grad: gradients of outputs with respect to inputs, without touching .grad."""

from __future__ import annotations




from .core import Tensor
from .grad_mode import enable_grad
from .creation import zeros_like


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
