"""Fused optimizer updates (Layer 0): one kernel launch per parameter tensor.

Each op reads the gradient and updates the parameter and its optimizer state in
place (the buffers are bound read_write); scalars that depend on the step count
(bias corrections, the learning rate) come from the host through the uniform
parameters, so a step needs no read-back."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, grid_1d

__all__ = ["sgd_step", "adam_step", "adadelta_step", "adagrad_step", "rmsprop_step", "nadam_step", "radam_step",
           "adamax_step", "rprop_step"]


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


def adadelta_step(dev, param, grad, square_avg, acc_delta, *, lr: float, rho: float, eps: float,
                  weight_decay: float = 0.0, maximize: bool = False) -> None:
    """One Adadelta update of `param`, `square_avg` and `acc_delta` in place
    (torch.optim.Adadelta's rule; see optim_adadelta.wgsl)."""
    n = _check_f32("adadelta_step", param=param, grad=grad, square_avg=square_avg, acc_delta=acc_delta)
    if n == 0:
        return
    kernel = dev.kernel("adadelta", load_shader("optim_adadelta.wgsl"), 1, 3, "Iffffff", entry_point="adadelta")
    params = (n, -1.0 if maximize else 1.0, weight_decay, rho, 1.0 - rho, eps, -lr)
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], [param, square_avg, acc_delta], params, grid_1d(dev, n))


def adagrad_step(dev, param, grad, state_sum, *, clr: float, eps: float, weight_decay: float = 0.0,
                 maximize: bool = False) -> None:
    """One Adagrad update of `param` and `state_sum` in place (torch.optim.Adagrad's
    rule; see optim_adagrad.wgsl). clr = lr / (1 + (step - 1) * lr_decay)."""
    n = _check_f32("adagrad_step", param=param, grad=grad, state_sum=state_sum)
    if n == 0:
        return
    kernel = dev.kernel("adagrad", load_shader("optim_adagrad.wgsl"), 1, 2, "Iffff", entry_point="adagrad")
    params = (n, -1.0 if maximize else 1.0, weight_decay, eps, -clr)
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], [param, state_sum], params, grid_1d(dev, n))


def rmsprop_step(dev, param, grad, square_avg, grad_avg=None, momentum_buf=None, *, lr: float, alpha: float,
                 eps: float, weight_decay: float = 0.0, momentum: float = 0.0, maximize: bool = False) -> None:
    """One RMSprop update of `param` and `square_avg` in place (torch.optim.RMSprop's
    rule; see optim_rmsprop.wgsl); `grad_avg` when centered, `momentum_buf` when
    momentum > 0, both updated in place too."""
    buffers = dict(param=param, grad=grad, square_avg=square_avg)
    outputs = [param, square_avg]
    entry = "rmsprop"
    if grad_avg is not None:
        buffers["grad_avg"] = grad_avg
        outputs.append(grad_avg)
        entry += "_centered"
    if momentum_buf is not None:
        buffers["momentum_buf"] = momentum_buf
        outputs.append(momentum_buf)
        entry += "_momentum"
    n = _check_f32("rmsprop_step", **buffers)
    if n == 0:
        return
    # The variant's state follows square_avg (binding 3): grad_avg first when centered.
    centered = grad_avg is not None
    source = load_shader("optim_rmsprop.wgsl", GRAD_AVG_BINDING=4 if centered else 5,
                         MOMENTUM_BINDING=5 if centered else 4)
    kernel = dev.kernel(entry, source, 1, len(outputs), "Ifffffff", entry_point=entry)
    params = (n, -1.0 if maximize else 1.0, weight_decay, alpha, 1.0 - alpha, eps, momentum, -lr)
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], outputs, params, grid_1d(dev, n))


def nadam_step(dev, param, grad, exp_avg, exp_avg_sq, *, beta1: float, beta2: float, eps: float,
               bias_correction2: float, grad_coef: float, avg_coef: float, weight_decay: float = 0.0,
               decay: float = 1.0, maximize: bool = False) -> None:
    """One NAdam update of `param`, `exp_avg` and `exp_avg_sq` in place (torch.optim.NAdam's
    rule; see optim_nadam.wgsl for grad_coef and avg_coef)."""
    n = _check_f32("nadam_step", param=param, grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)
    if n == 0:
        return
    kernel = dev.kernel("nadam", load_shader("optim_nadam.wgsl"), 1, 3, "Iffffffffff", entry_point="nadam")
    params = (n, -1.0 if maximize else 1.0, decay, weight_decay, 1.0 - beta1, beta2, 1.0 - beta2, eps,
              bias_correction2, grad_coef, avg_coef)
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], [param, exp_avg, exp_avg_sq], params, grid_1d(dev, n))


def radam_step(dev, param, grad, exp_avg, exp_avg_sq, *, lr: float, beta1: float, beta2: float, eps: float,
               bias_correction1: float, bias_correction2_sqrt: float, rect: float | None,
               weight_decay: float = 0.0, decay: float = 1.0, maximize: bool = False) -> None:
    """One RAdam update of `param`, `exp_avg` and `exp_avg_sq` in place (torch.optim.RAdam's
    rule; see optim_radam.wgsl). rect=None: an unrectified (momentum-only) step."""
    n = _check_f32("radam_step", param=param, grad=grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)
    if n == 0:
        return
    kernel = dev.kernel("radam", load_shader("optim_radam.wgsl"), 1, 3, "IfffffffffffI", entry_point="radam")
    params = (n, -1.0 if maximize else 1.0, decay, weight_decay, 1.0 - beta1, beta2, 1.0 - beta2, eps,
              bias_correction1, bias_correction2_sqrt, lr, 0.0 if rect is None else rect, int(rect is not None))
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], [param, exp_avg, exp_avg_sq], params, grid_1d(dev, n))


def adamax_step(dev, param, grad, exp_avg, exp_inf, *, clr: float, beta1: float, beta2: float, eps: float,
                weight_decay: float = 0.0, maximize: bool = False) -> None:
    """One Adamax update of `param`, `exp_avg` and `exp_inf` in place (torch.optim.Adamax's
    rule; see optim_adamax.wgsl). clr = lr / (1 - beta1^t)."""
    n = _check_f32("adamax_step", param=param, grad=grad, exp_avg=exp_avg, exp_inf=exp_inf)
    if n == 0:
        return
    kernel = dev.kernel("adamax", load_shader("optim_adamax.wgsl"), 1, 3, "Iffffff", entry_point="adamax")
    params = (n, -1.0 if maximize else 1.0, weight_decay, 1.0 - beta1, beta2, eps, -clr)
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], [param, exp_avg, exp_inf], params, grid_1d(dev, n))


def rprop_step(dev, param, grad, prev, step_size, *, etaminus: float, etaplus: float, step_size_min: float,
               step_size_max: float, maximize: bool = False) -> None:
    """One Rprop update of `param`, `prev` and `step_size` in place (torch.optim.Rprop's
    rule; see optim_rprop.wgsl)."""
    n = _check_f32("rprop_step", param=param, grad=grad, prev=prev, step_size=step_size)
    if n == 0:
        return
    kernel = dev.kernel("rprop", load_shader("optim_rprop.wgsl"), 1, 3, "Ifffff", entry_point="rprop")
    params = (n, -1.0 if maximize else 1.0, etaminus, etaplus, step_size_min, step_size_max)
    dev.launch(kernel, [_distinct_grad(dev, grad, param)], [param, prev, step_size], params, grid_1d(dev, n))
