"""torch.accelerator's names (torch >= 2.6): the device-agnostic face of anygpu.cuda.

Every WebGPU adapter is anygpu's accelerator, reported as the device type "cuda" (as
`tensor.device` is), so a script that builds ``torch.device(f"{acc}:{rank}")`` gets a device
anygpu accepts; `set_device_index` picks the process's adapter as `cuda.set_device` does.
"""

from __future__ import annotations

import contextlib

from . import cuda, placement

__all__ = ["is_available", "device_count", "current_accelerator", "current_device_index", "current_device_idx",
           "set_device_index", "set_device_idx", "synchronize", "device_index", "empty_cache"]


def is_available() -> bool:
    """True when wgpu sees an adapter (any kind, software ones included)."""
    return cuda.is_available()


def device_count() -> int:
    return cuda.device_count() if cuda.is_available() else 0


def current_accelerator(check_available: bool = False):
    """device(type='cuda') when an adapter exists, else None (as torch without accelerator)."""
    if check_available and not is_available():
        return None
    return placement.device("cuda") if is_available() else None


def current_device_index() -> int:
    return cuda.current_device()


def set_device_index(device, /) -> None:
    """Choose the process's adapter: an index, "cuda:N", a device (None: no change)."""
    if device is None:
        return
    cuda.set_device(device)


def synchronize(device=None, /) -> None:
    """Wait for the GPU work submitted so far."""
    cuda.synchronize(device)


def empty_cache() -> None:
    cuda.empty_cache()


@contextlib.contextmanager
def device_index(device, /):
    """Inside: adapter `device` (None: no change). anygpu uses one adapter per process, so
    only the process's adapter (or None) can be named."""
    if device is not None:
        placement.check_device("device_index", int(device))
    yield


current_device_idx = current_device_index
set_device_idx = set_device_index
