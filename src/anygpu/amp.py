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
gradients through them. Within a region (outermost `with` to its end) the float16 copy of a
float32 leaf that requires grad is made once and shared by its uses while the leaf's version
stays (torch's autocast cache; `cache_enabled=False` turns it off): one conversion forward,
one converted gradient backward. `cast_ahead(model.parameters())` makes those copies as a
region starts, all in one multi-tensor dispatch (the training loop's 16-mixed forward).
anygpu's optimizers do not bump a parameter's version, so keep `optimizer.step()` outside the
region, as torch's docs do (torch's cache is stale there too). Where the adapter lacks
'shader-f16', or autocast asks for bfloat16 (anygpu has no bfloat16 storage), the region runs
in float32 and says so once.

`GradScaler` has torch's semantics and defaults: `scale(loss)` multiplies by the scale,
`unscale_(opt)` divides the gradients by it and looks for inf/NaN, `step(opt)` skips
`opt.step()` when one was found, `update()` multiplies the scale by backoff_factor after a
skipped step and by growth_factor after growth_interval steps in a row without one.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings

import numpy as np

from . import dtypes, placement
from .tensor.elementwise import register_autocast

__all__ = ["autocast", "GradScaler", "is_autocast_available", "cast_ahead"]

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
        self._cache_enabled = cache_enabled is not False
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
        self._outer_cache = getattr(_state, "cache", None)
        _state.dtype = self._region_dtype()
        if _state.dtype is None or not self._cache_enabled:
            _state.cache = None
        elif self._outer_cache is None:  # the outermost caching region: its casts live until it ends
            _state.cache = {}
        return self

    def __exit__(self, *exc):
        _state.dtype = self._outer
        _state.cache = self._outer_cache
        return False


def cast_ahead(tensors) -> None:
    """Inside a caching float16 autocast region: make now, in one multi-tensor dispatch
    (ops/foreach.py cast_many), the float16 copies that the region would make at their first uses
    of the float32 leaves among `tensors` that require grad (a model's master weights), and
    cache them as those uses would: the same values, each with its own recorded conversion,
    so gradients are as without it (a copy that no op reads costs its conversion and gets no
    gradient). Elsewhere it does nothing. anygpu's own (torch converts each weight at its
    first use); the training loop calls it with the model's parameters."""
    cache = getattr(_state, "cache", None)
    if cache is None:
        return
    from .autograd.rules import backward as rule
    from .ops import foreach, gpu
    from .tensor import Tensor, is_grad_enabled
    from .tensor.elementwise import _autocast_copy, _keep_autocast_copy
    from .tensor.recording import _attach
    grad_mode = is_grad_enabled()
    todo: dict[int, Tensor] = {}
    for t in tensors:
        if (isinstance(t, Tensor) and t.dtype is dtypes.float32 and t.requires_grad and t._entry is None
                and _whole_buffer(t) and _autocast_copy(cache, t, grad_mode) is None):
            todo[id(t)] = t
    if not todo:
        return
    dev = gpu()
    leaves = list(todo.values())
    for t, buf in zip(leaves, foreach.cast_many(dev, [t._buf for t in leaves], "f16")):
        out = _attach("to", Tensor(buf, t.shape, dtypes.float16), (t,), rule("to", dev, "f32"))
        _keep_autocast_copy(cache, t, grad_mode, out)


def _whole_buffer(t) -> bool:
    """Whether Tensor t is all of its Buffer, in order (then a kernel may write the Buffer)."""
    return getattr(t, "_base", None) is None and getattr(t, "_view", None) is None and t._buf.len == t.numel()


class GradScaler:
    """torch.amp.GradScaler (init_scale 2**16, growth_factor 2, backoff_factor 0.5,
    growth_interval 2000), its state on the GPU as torch's on CUDA: the scale (a 0-d float32
    tensor, `_scale`), the growth tracker (0-d int32, `_growth_tracker`) and one found_inf
    flag per optimizer and step. `unscale_` divides the gradients by the scale and sets the
    flag where one is inf/NaN (ops/scaler.py); `step` hands the flag to an optimizer whose
    kernels skip the update where it is set (SGD, Adam, AdamW: `Optimizer._takes_found_inf`),
    else reads it back to decide (the others: such a step runs eagerly); `update` computes the
    next scale on the GPU. So such a step reads nothing back and `anygpu.compile` replays it; only
    get_scale() and state_dict() read the scale."""

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
        self._scale = None             # Tensor, made by the first scale() (torch's lazy init)
        self._growth_tracker = None    # Tensor, with _scale
        self._init_growth_tracker = 0
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._per_optimizer: dict[int, dict] = {}

    def _lazy_init(self) -> None:
        from .tensor import Tensor
        from .ops import gpu
        dev = gpu()
        self._scale = Tensor(dev.upload(np.array([self._init_scale], np.float32)), ())
        self._growth_tracker = Tensor(dev.upload(np.array([self._init_growth_tracker], np.int32)), (),
                                      dtypes.int32)

    def _stage(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(id(optimizer), {"stage": "ready", "found_inf": None})

    def scale(self, outputs):
        """outputs multiplied by the scale (a tensor or a nested list/tuple of them)."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._lazy_init()
        from .tensor import Tensor
        if isinstance(outputs, Tensor):
            return outputs * self._scale  # a 0-d float32 factor, promoting as torch's
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError(f"GradScaler.scale: outputs must be a Tensor or a list/tuple of them, "
                         f"got {type(outputs).__name__}")

    def unscale_(self, optimizer) -> None:
        """Divide optimizer's gradients by the scale in place, setting this step's found_inf
        flag of optimizer on the GPU where one is inf/NaN."""
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
        dev = gpu()
        whole, copied = [], []   # gradients unscaled and checked several per dispatch; views via a copy
        with no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    grad = getattr(p, "grad", None)
                    if not isinstance(grad, Tensor) or not grad.dtype.is_floating_point:
                        continue
                    if grad.dtype is dtypes.float16:
                        raise ValueError("GradScaler.unscale_: attempting to unscale float16 gradients "
                                         "(keep the parameters in float32 and use autocast)")
                    if grad.dtype is not dtypes.float32:
                        raise ValueError(f"GradScaler.unscale_: gradients must be float32, got {grad.dtype}")
                    if _whole_buffer(grad):
                        whole.append(grad)
                    else:
                        copied.append((grad, grad.clone()))
            # a Buffer two gradients share (add's backward hands both operands one) is unscaled once
            shared = list({id(g._buf): g._buf for g in whole}.values())
            flag = dev.unscale_check(shared + [c._buf for _, c in copied], scale=self._scale._buf)
            for g in whole:
                g._version += 1   # written in place, as mul_ would
                g._host = None
            for grad, unscaled in copied:
                grad.copy_(unscaled)
        stage["found_inf"] = flag
        stage["stage"] = "unscaled"

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs) unless a gradient was inf/NaN (then None). An
        optimizer that takes the flag skips its update on the GPU (and returns None either way)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        stage = self._stage(optimizer)
        if stage["stage"] == "stepped":
            raise RuntimeError("step() has already been called since the last update().")
        if stage["stage"] == "ready":
            self.unscale_(optimizer)
        takes_flag = getattr(type(optimizer), "_takes_found_inf", None)
        if not args and not kwargs and takes_flag is not None and takes_flag():
            result = optimizer._step_unless_found_inf(stage["found_inf"])
        else:
            from .ops import gpu
            found = bool(gpu().read(stage["found_inf"])[0])   # read back: such a step is not replayed
            result = None if found else optimizer.step(*args, **kwargs)
        stage["stage"] = "stepped"
        return result

    def update(self, new_scale=None) -> None:
        """The next scale: new_scale if given, else backoff after an inf/NaN, growth after
        growth_interval clean steps in a row (on the GPU, torch's _amp_update_scale_)."""
        if not self._enabled:
            return
        if self._scale is None:
            return
        if new_scale is not None:
            from .tensor import Tensor
            if isinstance(new_scale, Tensor):
                if new_scale.numel() != 1 or new_scale.requires_grad:
                    raise ValueError("GradScaler.update: new_scale must be a float or a one-element tensor "
                                     "that does not require grad")
                self._scale.copy_(new_scale.reshape(()))
            else:
                self._scale.fill_(float(new_scale))
        else:
            if not self._per_optimizer:
                raise RuntimeError("GradScaler.update: no inf checks were recorded prior to update "
                                   "(call step(optimizer) or unscale_(optimizer) first)")
            from .ops import gpu
            gpu().update_scale(self._scale._buf, self._growth_tracker._buf,
                               [s["found_inf"] for s in self._per_optimizer.values() if s["found_inf"] is not None],
                               growth_factor=self._growth_factor, backoff_factor=self._backoff_factor,
                               growth_interval=self._growth_interval)
            self._scale._version += 1
            self._scale._host = None
            self._growth_tracker._version += 1
            self._growth_tracker._host = None
        self._per_optimizer = {}

    def get_scale(self) -> float:
        """The scale (read back from the GPU once scale() has made it)."""
        if not self._enabled:
            return 1.0
        return self._init_scale if self._scale is None else float(self._scale.item())

    def _get_growth_tracker(self) -> int:
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker.item())

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
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict) -> None:
        if not isinstance(state_dict, dict):
            raise ValueError(f"GradScaler.load_state_dict: expected a dict, got {type(state_dict).__name__}")
        if not self._enabled:
            return
        if not state_dict:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._init_scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._init_growth_tracker = int(state_dict["_growth_tracker"])
        if self._scale is not None:
            self._scale.fill_(self._init_scale)
            self._growth_tracker.fill_(self._init_growth_tracker)
