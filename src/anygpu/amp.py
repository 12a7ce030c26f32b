"""torch.amp for anygpu: autocast and GradScaler entry points, run honestly in float32.

anygpu computes in float32 (f16 storage is future work, see the speed issue). So that
mixed-precision scripts run unchanged, `autocast(...)` accepts torch's arguments and runs
its region in float32 (the results are those of autocast disabled), and `GradScaler`
behaves as torch's `GradScaler(enabled=False)`: scale 1, `scale(loss)` returns the loss,
`step(opt)` calls `opt.step()`, `update()` and `unscale_()` do nothing. Each says so once
per process with a UserWarning.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings

from . import placement

__all__ = ["autocast", "GradScaler", "is_autocast_available"]

_warned: set[str] = set()


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
    """True for every device type anygpu accepts: autocast runs (in float32) on all of them."""
    return device_type in placement.DEVICE_TYPES


class autocast(contextlib.ContextDecorator):
    """torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None): the region
    runs in float32, anygpu's compute precision (warned once)."""

    def __init__(self, device_type: str = "cuda", dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str) or device_type.partition(":")[0] not in placement.DEVICE_TYPES:
            raise ValueError(f"autocast: device_type must be one of {', '.join(placement.DEVICE_TYPES)}, "
                             f"got {device_type!r}")
        if not isinstance(enabled, bool):
            raise ValueError(f"autocast: enabled must be a bool, got {enabled!r}")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = enabled
        if enabled:
            wanted = f" ({dtype})" if dtype is not None else ""
            _warn_once("autocast", f"autocast{wanted}: anygpu computes in float32, so this region runs in "
                                   "float32 (results as with autocast disabled)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class GradScaler:
    """torch.amp.GradScaler: with float32 compute there is nothing to scale, so this is
    torch's disabled scaler (scale 1; `step` calls `optimizer.step()`), warned once."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        if isinstance(device, str) and device.partition(":")[0] not in placement.DEVICE_TYPES:
            raise ValueError(f"GradScaler: device must be one of {', '.join(placement.DEVICE_TYPES)}, "
                             f"got {device!r}")
        if enabled:
            _warn_once("GradScaler", "GradScaler: anygpu computes in float32, so gradients are not scaled "
                                     "(scale 1, as torch's GradScaler(enabled=False))")
        self._device = device
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)

    def scale(self, outputs):
        """The outputs themselves (a tensor or a nested list/tuple of them)."""
        return outputs

    def unscale_(self, optimizer) -> None:
        return None

    def step(self, optimizer, *args, **kwargs):
        """optimizer.step(*args, **kwargs), its return value passed on (no inf/NaN check:
        that check exists for float16 overflow, which float32 compute does not have)."""
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        return None

    def get_scale(self) -> float:
        return 1.0

    def is_enabled(self) -> bool:
        return False

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def state_dict(self) -> dict:
        """{} — what torch's disabled scaler returns."""
        return {}

    def load_state_dict(self, state_dict) -> None:
        """Accepted and ignored, as by torch's disabled scaler."""
        if not isinstance(state_dict, dict):
            raise ValueError(f"GradScaler.load_state_dict: expected a dict, got {type(state_dict).__name__}")
