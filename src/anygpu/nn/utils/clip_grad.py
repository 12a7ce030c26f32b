"""Gradient clipping as torch.nn.utils: the total norm is computed and applied on the GPU
(no read-back unless error_if_nonfinite asks for a check), and gradients are scaled in
place, so references to `.grad` held elsewhere see the clipped values."""

from __future__ import annotations

import math

from ...tensor import Tensor, no_grad, stack, zeros

__all__ = ["clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_", "get_total_norm"]


def _tensors(values, what: str) -> list[Tensor]:
    values = [values] if isinstance(values, Tensor) else list(values)
    for value in values:
        if not isinstance(value, Tensor):
            raise TypeError(f"{what}: expected anygpu Tensors, got {type(value).__name__}")
    return values


def _grads(parameters, what: str) -> list[Tensor]:
    return [p.grad for p in _tensors(parameters, what) if p.grad is not None]


def _norm_type(norm_type, what: str) -> float:
    norm_type = float(norm_type)
    if not (norm_type > 0 or math.isinf(norm_type)):
        raise ValueError(f"{what}: norm_type must be positive or inf, got {norm_type}")
    return norm_type


def _write_in_place(target: Tensor, value: Tensor) -> None:
    target._dev.copy(value._buf, target._buf)
    target._host = None


def get_total_norm(tensors, norm_type: float = 2.0, error_if_nonfinite: bool = False, foreach=None) -> Tensor:
    """The norm of all `tensors` together, as if concatenated into one vector (0-d Tensor):
    (sum |x|^p)^(1/p), or max |x| for norm_type=inf (min |x| for -inf)."""
    norm_type = _norm_type(norm_type, "get_total_norm")
    tensors = _tensors(tensors, "get_total_norm")
    if not tensors:
        return zeros(())
    with no_grad():
        if math.isinf(norm_type):
            largest = norm_type > 0
            parts = [(t.abs().max() if largest else t.abs().min()) for t in tensors]
            total = stack(parts).max() if largest else stack(parts).min()
        elif norm_type == 2.0:
            total = stack([(t * t).sum() for t in tensors]).sum().sqrt()
        elif norm_type == 1.0:
            total = stack([t.abs().sum() for t in tensors]).sum()
        else:
            total = stack([(t.abs() ** norm_type).sum() for t in tensors]).sum() ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
                           "so it cannot be clipped. To disable this error and scale the gradients by the "
                           "non-finite norm anyway, set `error_if_nonfinite=False`")
    return total


def clip_grads_with_norm_(parameters, max_norm: float, total_norm: Tensor, foreach=None) -> None:
    """Scale every gradient by min(1, max_norm / (total_norm + 1e-6)), in place."""
    grads = _grads(parameters, "clip_grads_with_norm_")
    if not grads:
        return
    with no_grad():
        scale = (float(max_norm) / (total_norm + 1e-6)).clamp(max=1.0)
        for grad in grads:
            _write_in_place(grad, grad * scale)


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
                    foreach=None) -> Tensor:
    """Scale the gradients of `parameters` (a Tensor or an iterable) in place so that their
    total norm is at most max_norm; returns the total norm before clipping (0-d Tensor).
    Parameters without a gradient are skipped."""
    parameters = _tensors(parameters, "clip_grad_norm_")  # a generator would be spent by the first pass
    grads = _grads(parameters, "clip_grad_norm_")
    if not grads:
        return zeros(())
    total = get_total_norm(grads, norm_type, error_if_nonfinite)
    clip_grads_with_norm_(parameters, max_norm, total)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient of `parameters` to [-clip_value, clip_value], in place."""
    clip_value = float(clip_value)
    with no_grad():
        for grad in _grads(parameters, "clip_grad_value_"):
            _write_in_place(grad, grad.clamp(-clip_value, clip_value))
