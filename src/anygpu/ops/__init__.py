"""Layer 0: the seed's GPU ops as methods of `Device` (one Python function per op).

`Device` is the runtime's device with every op of this package bound as a method,
so `dev.matmul(a, b, m, n, k)` reads like the seed's `self.dev.matmul(...)`."""

from __future__ import annotations

import threading

from .. import runtime
from . import elementwise, matmul, nd, optim
from . import attention, broadcast, conv, loss, norm, reduce, shape, softmax, upsample
from . import batchnorm, index, layernorm, lossfn, pool, random
from . import intmath

_OP_MODULES = [elementwise, matmul, nd, reduce, broadcast, shape, upsample, softmax, attention, conv, norm,
               loss, optim]
_OP_MODULES += [batchnorm, index, layernorm, lossfn, pool, random]  # the ops behind nn.functional
_OP_MODULES += [intmath]  # integer tensors and sorting


class Device(runtime.Device):
    """A GPU device with every Layer-0 op as a method (see SPEC Layer 0)."""


def _bind_ops() -> None:
    for module in _OP_MODULES:
        for name in getattr(module, "__all__", None) or dir(module):
            fn = getattr(module, name)
            if name.startswith("_") or not callable(fn) or getattr(fn, "__module__", None) != module.__name__:
                continue
            if isinstance(fn, type):
                continue
            setattr(Device, name, fn)


def register(module) -> None:
    """Add a module's public functions (dev first) as Device methods."""
    if module not in _OP_MODULES:
        _OP_MODULES.append(module)
    _bind_ops()


_bind_ops()

_default: Device | None = None
_lock = threading.Lock()


def gpu() -> Device:
    """The process-wide default device (best adapter; ANYGPU_ADAPTER / ANYGPU_BACKEND honoured)."""
    global _default
    with _lock:
        if _default is None:
            _default = Device()
        return _default
