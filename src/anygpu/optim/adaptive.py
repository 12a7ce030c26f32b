"""More of torch.optim, with its names, defaults and update rules: Adadelta, Adagrad,
RMSprop, NAdam, RAdam, Adamax, Rprop and ASGD.

As for SGD and Adam (optimizers.py): one fused kernel per parameter per step updates
the parameter and its state buffers in place on the GPU (ops/optim.py, kernels/optim_*.wgsl);
what depends on the step count (bias corrections, NAdam's momentum schedule, RAdam's
rectification) is computed on the host in double precision, as torch computes it.
State dicts have torch's layout and state names, so a torch optimizer's state dict loads.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..tensor import Tensor, no_grad
from .optimizers import Optimizer, _check_hyper, _gpu_state

__all__ = ["Adadelta", "Adagrad", "RMSprop", "NAdam", "RAdam", "Adamax", "Rprop", "ASGD"]


def _refuse(name: str, capturable: bool = False, differentiable: bool = False) -> None:
    if capturable or differentiable:
        raise ValueError(f"{name}: capturable and differentiable are not supported")


def _check_betas(betas) -> tuple[float, float]:
    beta1, beta2 = betas
    if not 0.0 <= beta1 < 1.0:
        raise ValueError(f"Invalid beta parameter at index 0: {beta1}")
    if not 0.0 <= beta2 < 1.0:
        raise ValueError(f"Invalid beta parameter at index 1: {beta2}")
    return float(beta1), float(beta2)


def _check_lr_eps_decay(lr: float, eps: float, weight_decay: float) -> None:
    _check_hyper("learning rate", lr)
    _check_hyper("epsilon value", eps)
    _check_hyper("weight_decay value", weight_decay)


def _zeros_like(p: Tensor) -> Tensor:
    return Tensor(p._dev.alloc(p.numel(), p._buf.dtype), p.shape)


def _updated(p: Tensor) -> None:
    p._host = None  # the buffer changed under any cached host copy


def _weight_decay_args(group: dict[str, Any]) -> dict[str, float]:
    """NAdam's and RAdam's weight decay: an L2 term, or with decoupled_weight_decay the
    parameter decayed by 1 - lr * weight_decay before the step."""
    weight_decay = float(group["weight_decay"])
    if bool(group["decoupled_weight_decay"]):
        return dict(weight_decay=0.0, decay=1.0 - float(group["lr"]) * weight_decay)
    return dict(weight_decay=weight_decay, decay=1.0)


class _FusedPerParam(Optimizer):
    """The step every optimizer here shares: for each parameter with a gradient, its state
    (made on first use: step = 0, `_initial` scalars, then zeroed buffers named in
    `_zero_state`), step += 1, one fused kernel (`_update`), and the host copy dropped."""

    _zero_state: tuple[str, ...] = ()
    _initial: dict[str, Any] = {}

    def _state_for(self, p: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state.setdefault(p, {})
        if "step" not in state:
            state["step"] = 0
            state.update(self._initial)
            for name in self._zero_state:
                state[name] = _zeros_like(p)
        return state

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        raise NotImplementedError

    def _step_group(self, group: dict[str, Any]) -> None:
        for p in group["params"]:
            if p.grad is None:
                continue
            grad = self._grad_of(p)
            state = self._state_for(p, group)
            state["step"] += 1
            self._update(p, grad, state, group)
            _updated(p)


class Adadelta(_FusedPerParam):
    """Adadelta (torch.optim.Adadelta): g = grad + weight_decay*p;
    square_avg = rho*square_avg + (1-rho)*g^2; delta = sqrt(acc_delta+eps)/sqrt(square_avg+eps)*g;
    acc_delta = rho*acc_delta + (1-rho)*delta^2; p -= lr*delta."""

    _state_tensors = _zero_state = ("square_avg", "acc_delta")

    def __init__(self, params, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0.0,
                 foreach=None, *, capturable: bool = False, maximize: bool = False, differentiable: bool = False):
        _check_hyper("learning rate", lr)
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        _check_hyper("epsilon value", eps)
        _check_hyper("weight_decay value", weight_decay)
        _refuse("Adadelta", capturable, differentiable)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize))

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        p._dev.adadelta_step(p._buf, grad._buf, state["square_avg"]._buf, state["acc_delta"]._buf,
                             lr=float(group["lr"]), rho=float(group["rho"]), eps=float(group["eps"]),
                             weight_decay=float(group["weight_decay"]), maximize=bool(group["maximize"]))


class Adagrad(_FusedPerParam):
    """Adagrad (torch.optim.Adagrad): g = grad + weight_decay*p; sum += g^2;
    p -= lr/(1+(t-1)*lr_decay) * g/(sqrt(sum)+eps). As in torch, the state ("sum" =
    initial_accumulator_value, "step" = 0) exists from construction on."""

    _state_tensors = ("sum",)

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, foreach=None, *,
                 maximize: bool = False, differentiable: bool = False, fused=None):
        _check_hyper("learning rate", lr)
        _check_hyper("lr_decay value", lr_decay)
        _check_hyper("weight_decay value", weight_decay)
        _check_hyper("initial_accumulator_value value", initial_accumulator_value)
        _check_hyper("epsilon value", eps)
        _refuse("Adagrad", differentiable=differentiable)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, maximize=maximize))
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, group)

    def _init_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        value = float(group["initial_accumulator_value"])
        self.state[p] = {"step": 0, "sum": _gpu_state(p._dev, np.full(p.numel(), value, np.float64), p.shape, p._buf.dtype)}
        return self.state[p]

    def _state_for(self, p: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = self.state.get(p)
        if state is None or "sum" not in state:  # e.g. a state dict that left it out
            state = self._init_state(p, group)
        return state

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        clr = float(group["lr"]) / (1 + (state["step"] - 1) * float(group["lr_decay"]))
        p._dev.adagrad_step(p._buf, grad._buf, state["sum"]._buf, clr=clr, eps=float(group["eps"]),
                            weight_decay=float(group["weight_decay"]), maximize=bool(group["maximize"]))


class RMSprop(_FusedPerParam):
    """RMSprop (torch.optim.RMSprop): g = grad + weight_decay*p;
    square_avg = alpha*square_avg + (1-alpha)*g^2; avg = sqrt(square_avg) + eps
    (centered: sqrt(square_avg - grad_avg^2) + eps with grad_avg = lerp(grad_avg, g, 1-alpha));
    with momentum: buf = momentum*buf + g/avg, p -= lr*buf; else p -= lr*g/avg."""

    _state_tensors = ("square_avg", "momentum_buffer", "grad_avg")

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum: float = 0.0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False):
        _check_hyper("learning rate", lr)
        _check_hyper("epsilon value", eps)
        _check_hyper("momentum value", momentum)
        _check_hyper("weight_decay value", weight_decay)
        _check_hyper("alpha value", alpha)
        _refuse("RMSprop", capturable, differentiable)
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered, maximize=maximize))

    _zero_state = ("square_avg",)

    def _state_for(self, p: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        state = super()._state_for(p, group)
        if float(group["momentum"]) > 0 and "momentum_buffer" not in state:
            state["momentum_buffer"] = _zeros_like(p)
        if bool(group["centered"]) and "grad_avg" not in state:
            state["grad_avg"] = _zeros_like(p)
        return state

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        momentum = float(group["momentum"])
        centered = bool(group["centered"])
        p._dev.rmsprop_step(p._buf, grad._buf, state["square_avg"]._buf,
                            state["grad_avg"]._buf if centered else None,
                            state["momentum_buffer"]._buf if momentum > 0 else None,
                            lr=float(group["lr"]), alpha=float(group["alpha"]), eps=float(group["eps"]),
                            weight_decay=float(group["weight_decay"]), momentum=momentum,
                            maximize=bool(group["maximize"]))


class NAdam(_FusedPerParam):
    """NAdam (torch.optim.NAdam): Adam with Nesterov momentum and the momentum schedule
    mu_t = beta1 * (1 - 0.5 * 0.96^(t * momentum_decay)); weight_decay is an L2 term,
    or decays the parameter (p *= 1 - lr*weight_decay) with decoupled_weight_decay=True.
    State: step, mu_product (the product of mu_1..t), exp_avg, exp_avg_sq."""

    _state_tensors = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        _check_lr_eps_decay(lr, eps, weight_decay)
        _check_hyper("momentum_decay value", momentum_decay)
        betas = _check_betas(betas)
        _refuse("NAdam", capturable, differentiable)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize))

    _zero_state = _state_tensors
    _initial = {"mu_product": 1.0}

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        lr = float(group["lr"])
        beta1, beta2 = (float(b) for b in group["betas"])
        momentum_decay = float(group["momentum_decay"])
        step = state["step"]
        mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))
        mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * momentum_decay))
        # torch keeps mu_product in a float32 tensor: the product is rounded to float32 each step.
        mu_product = float(np.float32(state["mu_product"]) * np.float32(mu))
        state["mu_product"] = mu_product
        mu_product_next = mu_product * mu_next
        p._dev.nadam_step(p._buf, grad._buf, state["exp_avg"]._buf, state["exp_avg_sq"]._buf,
                          beta1=beta1, beta2=beta2, eps=float(group["eps"]),
                          bias_correction2=1 - beta2 ** step,
                          grad_coef=-lr * (1.0 - mu) / (1.0 - mu_product),
                          avg_coef=-lr * mu_next / (1.0 - mu_product_next),
                          maximize=bool(group["maximize"]), **_weight_decay_args(group))


class RAdam(_FusedPerParam):
    """RAdam (torch.optim.RAdam): Adam's moments; while the length of the approximated
    simple moving average rho_t is at most 5 the step is momentum only,
    p -= lr * m/(1-beta1^t); after that it is rectified,
    p -= lr * m/(1-beta1^t) * sqrt(1-beta2^t)/(sqrt(v)+eps) * rect(rho_t).
    weight_decay as in NAdam (L2, or decoupled_weight_decay=True)."""

    _state_tensors = ("exp_avg", "exp_avg_sq")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False):
        _check_lr_eps_decay(lr, eps, weight_decay)
        betas = _check_betas(betas)
        _refuse("RAdam", capturable, differentiable)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=decoupled_weight_decay, maximize=maximize))

    _zero_state = _state_tensors

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        beta1, beta2 = (float(b) for b in group["betas"])
        rho_inf = 2 / (1 - beta2) - 1
        step = state["step"]
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        rect = None
        if rho_t > 5.0:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        p._dev.radam_step(p._buf, grad._buf, state["exp_avg"]._buf, state["exp_avg_sq"]._buf,
                          lr=float(group["lr"]), beta1=beta1, beta2=beta2, eps=float(group["eps"]),
                          bias_correction1=bias_correction1,
                          bias_correction2_sqrt=math.sqrt(bias_correction2), rect=rect,
                          maximize=bool(group["maximize"]), **_weight_decay_args(group))


class Adamax(_FusedPerParam):
    """Adamax (torch.optim.Adamax): Adam with the infinity norm, g = grad + weight_decay*p;
    exp_avg = lerp(exp_avg, g, 1-beta1); exp_inf = max(beta2*exp_inf, |g| + eps);
    p -= lr/(1-beta1^t) * exp_avg/exp_inf."""

    _state_tensors = ("exp_avg", "exp_inf")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 foreach=None, *, maximize: bool = False, differentiable: bool = False, capturable: bool = False):
        _check_lr_eps_decay(lr, eps, weight_decay)
        betas = _check_betas(betas)
        _refuse("Adamax", capturable, differentiable)
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, maximize=maximize))

    _zero_state = _state_tensors

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        beta1, beta2 = (float(b) for b in group["betas"])
        clr = float(group["lr"]) / (1 - beta1 ** state["step"])
        p._dev.adamax_step(p._buf, grad._buf, state["exp_avg"]._buf, state["exp_inf"]._buf, clr=clr,
                           beta1=beta1, beta2=beta2, eps=float(group["eps"]),
                           weight_decay=float(group["weight_decay"]), maximize=bool(group["maximize"]))


class Rprop(_FusedPerParam):
    """Rprop (torch.optim.Rprop): each element's step size grows by etas[1] while the
    gradient keeps its sign and shrinks by etas[0] when it flips (that step is skipped),
    within step_sizes; p -= sign(grad) * step_size. State: step, prev, step_size (= lr at first)."""

    _state_tensors = ("prev", "step_size")

    def __init__(self, params, lr: float = 1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *,
                 capturable: bool = False, foreach=None, maximize: bool = False, differentiable: bool = False):
        _check_hyper("learning rate", lr)
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        _refuse("Rprop", capturable, differentiable)
        super().__init__(params, dict(lr=lr, etas=(float(etas[0]), float(etas[1])),
                                      step_sizes=(float(step_sizes[0]), float(step_sizes[1])), maximize=maximize))

    _zero_state = ("prev",)

    def _state_for(self, p: Tensor, group: dict[str, Any]) -> dict[str, Any]:
        fresh = "step" not in self.state.get(p, {})
        state = super()._state_for(p, group)
        if fresh:
            state["step_size"] = _gpu_state(p._dev, np.full(p.numel(), float(group["lr"]), np.float64), p.shape, p._buf.dtype)
        return state

    def _update(self, p: Tensor, grad: Tensor, state: dict[str, Any], group: dict[str, Any]) -> None:
        etaminus, etaplus = (float(e) for e in group["etas"])
        low, high = (float(s) for s in group["step_sizes"])
        p._dev.rprop_step(p._buf, grad._buf, state["prev"]._buf, state["step_size"]._buf, etaminus=etaminus,
                          etaplus=etaplus, step_size_min=low, step_size_max=high,
                          maximize=bool(group["maximize"]))


class ASGD(Optimizer):
    """Averaged SGD (torch.optim.ASGD): g = grad + weight_decay*p; p = p*(1 - lambd*eta) - eta*g;
    ax (the running average of p) = p while mu is 1, else ax + mu*(p - ax); then eta =
    lr / (1 + lambd*lr*step)^alpha and mu = 1 / max(1, step - t0). eta and mu are float32
    scalars, as torch's 0-d state tensors; the update runs as Tensor ops in place."""

    _state_tensors = ("ax",)

    def __init__(self, params, lr: float = 1e-2, lambd: float = 1e-4, alpha: float = 0.75, t0: float = 1e6,
                 weight_decay: float = 0.0, foreach=None, maximize: bool = False, differentiable: bool = False,
                 capturable: bool = False):
        _check_hyper("learning rate", lr)
        _check_hyper("weight_decay value", weight_decay)
        _refuse("ASGD", capturable, differentiable)
        super().__init__(params, dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay,
                                      maximize=maximize))

    def _step_group(self, group: dict[str, Any]) -> None:
        lr, lambd, alpha, t0 = (float(group[k]) for k in ("lr", "lambd", "alpha", "t0"))
        weight_decay = float(group["weight_decay"])
        for p, grad, state in self._with_grads(group):
            if "step" not in state:
                state.update(step=0, eta=np.float32(lr), mu=np.float32(1.0), ax=_zeros_like(p))  # zero-filled
            state["step"] += 1
            eta, mu = float(np.float32(state["eta"])), float(np.float32(state["mu"]))
            with no_grad():
                g = -grad if group["maximize"] else grad
                if weight_decay:
                    g = g + p * weight_decay
                p.mul_(1 - lambd * eta)
                p.add_(g, alpha=-eta)
                ax = state["ax"]
                if mu != 1:
                    ax.add_((p - ax) * mu)
                else:
                    ax.copy_(p)
            _updated(p)
            step = state["step"]
            state["eta"] = np.float32(lr / ((1 + lambd * lr * step) ** alpha))
            state["mu"] = np.float32(1 / max(1, step - t0))
