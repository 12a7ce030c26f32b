"""torch.amp for anygpu: autocast with float16 and a real GradScaler.

`autocast(device_type, dtype=torch.float16)` runs the ops of torch's CUDA autocast lists
that way on every device type (anygpu has one adapter; torch's CPU lists differ):

- lower precision (`LOWER`: matmul, mm, bmm, linear, conv1d/2d, conv_transpose2d, prelu,
  scaled_dot_product_attention):
  float32 inputs are converted to float16 and the result is float16;
- float32 (`FLOAT32`: softmax, log_softmax, layer_norm, group_norm, the losses, sum, prod,
  cumsum, exp, log, pow, ...): float16 inputs are converted to float32, the result is
  float32;
- every other op runs in its inputs' dtype (a float16 and a float32 tensor give float32).

The conversions are recorded ops, so float32 parameters (master weights) receive float32
gradients through them. Where the adapter lacks 'shader-f16', or autocast asks for
bfloat16 (anygpu has no bfloat16 storage), the region runs in float32 and says so once.

`GradScaler` has torch's semantics and defaults: `scale(loss)` multiplies by the scale,
`unscale_(opt)` divides the gradients by it and looks for inf/NaN, `step(opt)` skips
`opt.step()` when one was found, `update()` multiplies the scale by backoff_factor after a
skipped step and by growth_factor after growth_interval steps in a row without one.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import warnings

from . import dtypes, placement
from .tensor.elementwise import register_autocast

__all__ = ["autocast", "GradScaler", "is_autocast_available"]

LOWER = frozenset({"matmul", "mm", "bmm", "linear", "conv1d", "conv2d", "conv_transpose2d", "prelu",
                   "scaled_dot_product_attention"})
FLOAT32 = frozenset({
    "softmax", "log_softmax", "softmin", "layer_norm", "group_norm", "normalize", "cross_entropy", "nll_loss",
    "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "binary_cross_entropy_with_logits",
    "soft_margin_loss", "margin_ranking_loss", "hinge_embedding_loss", "cosine_embedding_loss",
    "triplet_margin_loss", "poisson_nll_loss", "multilabel_soft_margin_loss", "cosine_similarity", "softplus",
    "sum", "prod", "cumsum", "cumprod", "norm", "exp", "expm1", "log", "log1p", "log2", "log10", "pow",
    "reciprocal", "rsqrt", "acos", "asin", "cosh", "sinh", "tan", "erfinv", "dist"})

_warned: set[str] = set()
_state = threading.local()


def _warn_once(key: str, message: str) -> None:
    if key in _warned:
        return
    _warned.add(key)
    # Point at the user's line, past anygpu's own frames (torch.cuda.amp adds one).
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(0), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, UserWarning, stacklevel=level)


def is_autocast_available(device_type: str) -> bool:
    """True for every device type anygpu accepts."""
    return device_type in placement.DEVICE_TYPES


def fast_dtype():
    """float16 inside an enabled float16 autocast region of this thread, else None."""
    return getattr(_state, "dtype", None)


def policy(op: str):
    """The dtype autocast wants op's float inputs in now (float16, float32), or None."""
    fast = getattr(_state, "dtype", None)
    if fast is None:
        return None
    return fast if op in LOWER else dtypes.float32 if op in FLOAT32 else None


register_autocast(_state, policy)  # the tensor package reads the region through this hook


def is_autocast_enabled(device_type: str | None = None) -> bool:
    return fast_dtype() is not None


class autocast(contextlib.ContextDecorator):
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None): float16
    autocast (the default dtype of every device type here; see the module doc)."""

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str) or device_type.partition(":")[0] not in placement.DEVICE_TYPES:
            raise ValueError(f"autocast: device_type must be one of {', '.join(placement.DEVICE_TYPES)}, "
                             f"got {device_type!r}")
        if not isinstance(enabled, bool):
            raise ValueError(f"autocast: enabled must be a bool, got {enabled!r}")
        self.device = device_type
        self.fast_dtype = dtypes.float16 if dtype is None else dtypes.to_dtype(
            dtype, "autocast") if dtype is not dtypes.bfloat16 and dtype != "bfloat16" else dtypes.bfloat16
        self._enabled = enabled
        self._active = None
        if enabled and self.fast_dtype not in (dtypes.float16, dtypes.float32, dtypes.bfloat16):
            raise ValueError(f"autocast: dtype must be float16 or bfloat16, got {dtype!r}")

    def _region_dtype(self):
        if not self._enabled:
            return None
        if self.fast_dtype is dtypes.bfloat16 or self.fast_dtype is dtypes.float32:
            _warn_once("autocast-bf16", f"autocast ({self.fast_dtype}): anygpu has no bfloat16 storage, so this "
                                        "region runs in float32 (results as with autocast disabled)")
            return None
        from .ops import gpu
        if not gpu().supports("f16"):
            _warn_once("autocast-f16", "autocast (torch.float16): this adapter lacks 'shader-f16', so this region "
                                       "runs in float32 (results as with autocast disabled)")
            return None
        return dtypes.float16

    def __enter__(self):
        self._outer = getattr(_state, "dtype", None)
        _state.dtype = self._region_dtype()
        return self

    def __exit__(self, *exc):
        _state.dtype = self._outer
        return False


def _whole_buffer(t) -> bool:
    """Whether Tensor t is all of its Buffer, in order (then a kernel may write the Buffer)."""
    return getattr(t, "_base", None) is None and getattr(t, "_view", None) is None and t._buf.len == t.numel()


class GradScaler:
    """torch.amp.GradScaler (init_scale 2**16, growth_factor 2, backoff_factor 0.5,
    growth_interval 2000). The scale lives on the host: one read per step (the inf/NaN
    check) decides whether the step runs."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if isinstance(device, str) and device.partition(":")[0] not in placement.DEVICE_TYPES:
            raise ValueError(f"GradScaler: device must be one of {', '.join(placement.DEVICE_TYPES)}, "
                             f"got {device!r}")
        if enabled and not growth_factor > 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}")
        if enabled and not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        self._device = device
        self._enabled = bool(enabled)
        self._init_scale = float(init_scale)
        self._scale: float | None = None
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict] = {}

    def _stage(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": "ready", "found_inf": False})

    def scale(self, outputs):
        """outputs multiplied by the scale (a tensor or a nested list/tuple of them)."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._scale = self._init_scale
        from .tensor import Tensor, full
        if isinstance(outputs, Tensor):
            return outputs * full((), self._scale)  # a 0-d float32 factor, promoting as torch's
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError(f"GradScaler.scale: outputs must be a Tensor or a list/tuple of them, "
                         f"got {type(outputs).__name__}")

    def unscale_(self, optimizer) -> None:
        """Divide optimizer's gradients by the scale in place, noting whether any is inf/NaN."""
        if not self._enabled:
            return
        if self._scale is None:
            raise RuntimeError("GradScaler.unscale_: scale(loss) was never called, so there is nothing to unscale")
        stage = self._stage(optimizer)
        if stage["stage"] == "unscaled":
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if stage["stage"] == "stepped":
            raise RuntimeError("unscale_() is being called after step().")
        from .ops import gpu
        from .tensor import Tensor, no_grad
        inverse = 1.0 / self._scale
        total = None
        whole = []   # gradients that are their whole Buffer: unscaled and checked several per dispatch
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    grad = getattr(p, "grad", None)
                    if not isinstance(grad, Tensor):
                        continue
                    if grad.dtype is dtypes.float16:
                        raise ValueError("GradScaler.unscale_: attempting to unscale float16 gradients "
                                         "(keep the parameters in float32 and use autocast)")
                    if grad.dtype is dtypes.float32 and _whole_buffer(grad):
                        whole.append(grad)
                        continue
                    grad.mul_(inverse)
                    probe = (grad * 0.0).sum()  # 0 unless an element is inf or NaN
                    total = probe if total is None else total + probe
            found = False
            if whole:
                dev = gpu()
                flag = dev.unscale_check([g._buf for g in whole], inverse)
                for g in whole:
                    g._version += 1   # written in place, as mul_ would
                found = bool(dev.read(flag)[0])
        stage["found_inf"] = found or (total is not None and not math.isfinite(float(total.item())))
        stage["stage"] = "unscaled"

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) unless a gradient was inf/NaN (then None)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        stage = self._stage(optimizer)
        if stage["stage"] == "stepped":
            raise RuntimeError("step() has already been called since the last update().")
        if stage["stage"] == "ready":
            self.unscale_(optimizer)
        result = None if stage["found_inf"] else optimizer.step(*args, **kwargs)
        stage["stage"] = "stepped"
        return result

    def update(self, new_scale=None) -> None:
        """The next scale: new_scale if given, else backoff after an inf/NaN, growth after
        growth_interval clean steps in a row."""
        if not self._enabled:
            return
        if self._scale is None:
            return
        if new_scale is not None:
            value = float(new_scale.item() if hasattr(new_scale, "item") else new_scale)
            self._scale = value
        else:
            if not self._per_optimizer:
                raise RuntimeError("GradScaler.update: no inf checks were recorded prior to update "
                                   "(call step(optimizer) or unscale_(optimizer) first)")
            if any(s["found_inf"] for s in self._per_optimizer.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                tracker = self._growth_tracker + 1
                if tracker == self._growth_interval:
                    grown = self._scale * self._growth_factor
                    if math.isfinite(grown):
                        self._scale = grown
                    tracker = 0
                self._growth_tracker = tracker
        self._per_optimizer = {}

    def get_scale(self) -> float:
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else self._scale

    def is_enabled(self) -> bool:
        return self._enabled

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def state_dict(self) -> dict:
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker
        ({} when disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict) -> None:
        if not isinstance(state_dict, dict):
            raise ValueError(f"GradScaler.load_state_dict: expected a dict, got {type(state_dict).__name__}")
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
