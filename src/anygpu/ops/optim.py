"""Fused optimizer updates (Layer 0): one kernel launch per parameter tensor.

Each op reads the gradient and updates the parameter and its optimizer state in
place (the buffers are bound read_write); scalars that depend on the step count
(bias corrections, the learning rate) come from the host through the uniform
parameters, so a step needs no read-back."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, grid_1d

__all__ = ["sgd_step", "adam_step"]


def _check_f32(op: str, **buffers) -> int:
    """Check every named buffer is an f32 Buffer of the first one's length; return it."""
    n = None
    first = None
    for name, buf in buffers.items():
        check_buffer(op, name, buf, n, f"len({first})" if first else "")
        if buf.dtype != "f32":
            raise ValueError(f"{op}: {name} must be a float32 buffer, got {buf.dtype}")
        if n is None:
            n, first = buf.len, name
    return n


def _distinct_grad(dev, grad, param):
    # WebGPU forbids binding one buffer read-only and read_write in the same dispatch.
    return dev.copy(grad) if grad._gpu is param._gpu else grad


def sgd_step(dev, param, grad, momentum_buf=None, *, lr: float, momentum: float = 0.0,
             dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
             first: bool = False, maximize: bool = False) -> None:
    """One SGD update of `param` in place (torch.optim.SGD's rule; see optim_sgd.wgsl).

    momentum_buf: the momentum buffer (same length), updated in place; None for plain
    SGD. first=True on the step that creates it (it is then set to the gradient)."""
    if momentum_buf is None:
        n = _check_f32("sgd_step", param=param, grad=grad)
        entry, outputs = "sgd", [param]
    else:
        n = _check_f32("sgd_step", param=param, grad=grad, momentum_buf=momentum_buf)
        entry, outputs = "sgd_momentum", [param, momentum_buf]
    if n == 0:
        return
    kernel = dev.kernel(entry, load_shader("optim_sgd.wgsl"), 1, len(outputs), "IfffffII", entry_point=entry)
    params = (n, lr, momentum, 1.0 - dampening, weight_decay, -1.0 if maximize else 1.0,
              int(bool(nesterov)), int(bool(first)))
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], outputs, params, grid_1d(dev, n))


def adam_step(dev, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq=None, *, step_size: float,
              beta1: float, beta2: float, eps: float, bias_correction2_sqrt: float,
              weight_decay: float = 0.0, decay: float = 1.0, maximize: bool = False) -> None:
    """One Adam/AdamW update of `param`, `exp_avg`, `exp_avg_sq` (and `max_exp_avg_sq`
    when given: amsgrad) in place, with torch.optim.Adam's rule (see optim_adam.wgsl).

    step_size = lr / (1 - beta1^t); bias_correction2_sqrt = sqrt(1 - beta2^t);
    weight_decay is Adam's L2 term added to the gradient; decay multiplies the
    parameter first (AdamW: 1 - lr * weight_decay)."""
    buffers = dict(param=param, grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)
    if max_exp_avg_sq is not None:
        buffers["max_exp_avg_sq"] = max_exp_avg_sq
    n = _check_f32("adam_step", **buffers)
    if n == 0:
        return
    outputs = [param, exp_avg, exp_avg_sq] + ([max_exp_avg_sq] if max_exp_avg_sq is not None else [])
    entry = "adam" if max_exp_avg_sq is None else "adam_amsgrad"
    kernel = dev.kernel(entry, load_shader("optim_adam.wgsl"), 1, len(outputs), "Ifffffffff", entry_point=entry)
    params = (n, -1.0 if maximize else 1.0, decay, weight_decay, 1.0 - beta1, beta2, 1.0 - beta2, eps,
              bias_correction2_sqrt, -step_size)
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], outputs, params, grid_1d(dev, n))
