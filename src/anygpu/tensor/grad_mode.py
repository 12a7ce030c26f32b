"""Grad mode (no_grad, enable_grad, inference_mode, set_grad_enabled) and anomaly detection."""

from __future__ import annotations

import contextlib
import functools
import threading

import numpy as np

from ..autograd.engine import Entry




_state = threading.local()


# torch.autograd's anomaly mode (set_detect_anomaly / detect_anomaly): with it on, every backward
# rule's gradients are read back and a NaN among them raises, naming the rule.
_ANOMALY = {"enabled": False, "check_nan": True}


def is_anomaly_enabled() -> bool:
    return _ANOMALY["enabled"]


def is_anomaly_check_nan_enabled() -> bool:
    return _ANOMALY["check_nan"]


class set_detect_anomaly:
    """torch.autograd.set_detect_anomaly(mode, check_nan=True): on or off from the call on, and
    as a context manager back to the previous setting at its end."""

    def __init__(self, mode: bool, check_nan: bool = True):
        self._previous = dict(_ANOMALY)
        _ANOMALY.update(enabled=bool(mode), check_nan=bool(check_nan))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        _ANOMALY.update(self._previous)


class detect_anomaly(contextlib.ContextDecorator):
    """torch.autograd.detect_anomaly(check_nan=True): anomaly mode on inside the block (or the
    decorated function)."""

    def __init__(self, check_nan: bool = True):
        self.check_nan = bool(check_nan)
        self._previous: list = []

    def __enter__(self):
        self._previous.append(dict(_ANOMALY))
        _ANOMALY.update(enabled=True, check_nan=self.check_nan)
        return self

    def __exit__(self, *exc) -> None:
        _ANOMALY.update(self._previous.pop())


def _nan_check(dev):
    def check(entry: Entry, grads) -> None:
        for i, grad in enumerate(grads):
            if grad is not None and grad.dtype in ("f32", "f16", "f64") and np.isnan(dev.read(grad)).any():
                raise RuntimeError(f"Function '{entry.name}Backward' returned nan values in its {i}th output.")
    return check


def is_grad_enabled() -> bool:
    return getattr(_state, "grad_enabled", True)


class _GradMode(contextlib.ContextDecorator):
    """Sets grad mode to `_mode` inside: `with no_grad():`, `@no_grad()` and bare `@no_grad`."""

    _mode = False

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        if not callable(orig_func):
            raise ValueError(f"{cls.__name__}: expected no argument or a function to decorate, got {orig_func!r}")
        return cls()(orig_func)

    def __init__(self, orig_func=None):
        self._saved = []  # a stack: one decorator instance may be entered again by recursion

    def __enter__(self):
        self._saved.append(is_grad_enabled())
        _state.grad_enabled = self._mode

    def __exit__(self, *exc):
        _state.grad_enabled = self._saved.pop()
        return False


class no_grad(_GradMode):
    """Context manager / decorator: ops inside record nothing for autograd."""


class enable_grad(_GradMode):
    """Context manager / decorator: ops inside record for autograd (inside a no_grad block too)."""

    _mode = True


class inference_mode(_GradMode):
    """torch.inference_mode(mode=True): no_grad when mode is True; inference_mode(False) records
    again. anygpu keeps no 'inference tensor' flag, so tensors made inside may later join
    autograd graphs (torch refuses that)."""

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):
            return cls()(mode)
        return object.__new__(cls)

    def __init__(self, mode: bool = True):
        super().__init__()
        self._enabled = bool(mode)

    def __enter__(self):
        self._saved.append((is_grad_enabled(), is_inference_mode_enabled()))
        # As torch: inference_mode(False) turns recording back on (inside no_grad too).
        _state.grad_enabled = not self._enabled
        _state.inference = self._enabled

    def __exit__(self, *exc):
        _state.grad_enabled, _state.inference = self._saved.pop()
        return False


def is_inference_mode_enabled() -> bool:
    return getattr(_state, "inference", False)


class set_grad_enabled:
    """Switch autograd recording on or off: as a call (`set_grad_enabled(False)` takes effect
    at once), as a context manager (restores the previous mode on exit) or as a decorator."""

    def __init__(self, mode: bool):
        self._prev = is_grad_enabled()
        self._mode = bool(mode)
        _state.grad_enabled = self._mode

    def __call__(self, func):
        _state.grad_enabled = self._prev  # decorating must not change the mode around it
        mode = self._mode

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return func(*args, **kwargs)
        return wrapper

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _state.grad_enabled = self._prev
        return False
