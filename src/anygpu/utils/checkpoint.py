"""torch.utils.checkpoint: trade compute for memory. `checkpoint(fn, *args)` runs fn without
recording its graph (its intermediate values are freed at once) and runs it again, recording,
when backward reaches it; the gradients are those of fn run plainly. The random stream is
put back for the second run (preserve_rng_state), so dropout draws the same masks.

Both of torch's forms (use_reentrant True or False) behave as this one: a node whose backward
recomputes and differentiates fn, sending the gradients of parameters used inside fn to their
`.grad` as plain backward does."""

from __future__ import annotations

import copy

from ..custom_function import Function
from ..tensor import (
    Tensor, default_generator, enable_grad, grad_ready_hooks, is_grad_enabled, post_backward_hooks, zeros,
)

__all__ = ["checkpoint", "checkpoint_sequential"]


class _Checkpoint(Function):
    @staticmethod
    def forward(ctx, run, preserve_rng_state, kwargs, anchor, *args):
        ctx.run, ctx.kwargs = run, kwargs
        ctx.rng_state = copy.deepcopy(default_generator().bit_generator.state) if preserve_rng_state else None
        ctx.inputs = args
        return run(*args, **kwargs)

    @staticmethod
    def backward(ctx, *grads):
        inputs = [a.detach().requires_grad_(a.requires_grad) if isinstance(a, Tensor) else a for a in ctx.inputs]
        generator = default_generator().bit_generator
        now = copy.deepcopy(generator.state) if ctx.rng_state is not None else None
        if ctx.rng_state is not None:
            generator.state = ctx.rng_state
        with enable_grad():  # backward runs without recording; the recomputation records
            try:
                outputs = ctx.run(*inputs, **ctx.kwargs)
            finally:
                if now is not None:
                    generator.state = now
            outputs = outputs if isinstance(outputs, tuple) else (outputs,)
            total = None
            for out, grad in zip(outputs, grads):
                if isinstance(out, Tensor) and out.requires_grad and grad is not None:
                    term = (out * grad).sum()
                    total = term if total is None else total + term
            if total is not None:  # parameters used inside fn get their .grad here, as in torch
                _quietly_backward(total)
        return (None, None, None, None, *(x.grad if isinstance(x, Tensor) and x.requires_grad else None
                                          for x in inputs))


def _quietly_backward(total: Tensor) -> None:
    """total.backward() without the hooks that watch a whole backward (DistributedDataParallel's
    bucket launches): this one runs inside the outer backward, whose own hooks fire when it ends,
    and a parameter used outside the block too is not final here."""
    saved = (list(grad_ready_hooks), list(post_backward_hooks))
    grad_ready_hooks.clear()
    post_backward_hooks.clear()
    try:
        total.backward()
    finally:
        grad_ready_hooks[:], post_backward_hooks[:] = saved


def checkpoint(function, *args, use_reentrant: bool | None = None, context_fn=None, determinism_check: str = "default",
               debug: bool = False, preserve_rng_state: bool = True, **kwargs):
    """function(*args, **kwargs), recomputed during backward instead of kept (see the module doc)."""
    if not callable(function):
        raise TypeError(f"checkpoint: expected a callable, got {type(function).__name__}")
    if context_fn is not None:
        raise ValueError("checkpoint: context_fn is not supported by anygpu")
    # The anchor makes the node record even when no input requires grad (the first block of a
    # model, fed plain data), so parameters inside fn still get their gradients.
    anchor = zeros(1, requires_grad=True) if is_grad_enabled() else None
    return _Checkpoint.apply(function, bool(preserve_rng_state), kwargs, anchor, *args)


def checkpoint_sequential(functions, segments: int, input, use_reentrant: bool | None = None, **kwargs):
    """Run a Sequential (or a list of modules) in `segments` checkpointed pieces; the last
    piece runs plainly, as torch's."""
    functions = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be at least 1, got {segments}")
    size = max(len(functions) // segments, 1)

    def run_range(start, end):
        def forward(x):
            for layer in functions[start:end]:
                x = layer(x)
            return x
        return forward

    end = -1
    for start in range(0, size * (segments - 1), size):
        end = min(start + size, len(functions)) - 1
        input = checkpoint(run_range(start, end + 1), input, **kwargs)
    return run_range(end + 1, len(functions))(input)
