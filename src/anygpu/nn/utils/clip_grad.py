"""Gradient clipping as torch.nn.utils: the total norm is computed and applied on the GPU
(no read-back unless error_if_nonfinite asks for a check), and gradients are scaled in
place, so references to `.grad` held elsewhere see the clipped values.

float32 gradients that are whole Buffers (the usual case) take the multi-tensor path, as
torch's foreach one does: the 2-norm's sums of squares of many gradients per dispatch
(ops/foreach.py, with the bits of one `(g * g).sum()` per gradient) and the scaling of many
gradients per dispatch; other gradients, norms and dtypes (and foreach=False) go one
tensor at a time."""

from __future__ import annotations

import math

from ...tensor import Tensor, float32, no_grad, stack, zeros

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


def _multi_tensor(tensors: list[Tensor]) -> bool:
    """Whether the multi-tensor kernels take `tensors`: float32, each all of its Buffer, one device."""
    if not tensors:
        return False
    dev = tensors[0]._dev
    for t in tensors:
        if t.dtype is not float32 or t._base is not None or t._view is not None or t._buf.len != t.numel():
            return False
        if t._dev is not dev:
            return False
    return True


def _distinct(grads: list[Tensor]) -> list[Tensor]:
    """grads with each Buffer once: a Buffer shared by two gradients (an add routes one to
    both leaves) is scaled once, as torch scales each of its two gradient tensors once."""
    seen: dict[int, Tensor] = {}
    for g in grads:
        seen.setdefault(id(g._buf) if g._base is None and g._view is None else id(g), g)
    return list(seen.values())


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
        elif norm_type == 2.0 and foreach is not False and _multi_tensor(tensors):
            dev = tensors[0]._dev
            total = Tensor(dev.sum_all(dev.sum_squares([t._buf for t in tensors])), ()).sqrt()
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
        if foreach is not False and _multi_tensor(grads) and _multi_tensor([scale]) and scale.numel() == 1 and scale._dev is grads[0]._dev:
            grads[0]._dev.scale_by([g._buf for g in _distinct(grads)], scale._buf)
            for grad in grads:
                grad._host = None
            return
        for grad in _distinct(grads):
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
    total = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total, foreach)
    return total


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient of `parameters` to [-clip_value, clip_value], in place."""
    clip_value = float(clip_value)
    with no_grad():
        for grad in _grads(parameters, "clip_grad_value_"):
            _write_in_place(grad, grad.clamp(-clip_value, clip_value))
