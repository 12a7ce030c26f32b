"""torch.cuda for anygpu: reports the WebGPU adapters, so CUDA scripts take their GPU path
on any card (NVIDIA, AMD, Intel, Apple, or a software adapter such as lavapipe).

"cuda" means "a WebGPU adapter" here: `is_available()` is True when wgpu sees an adapter,
`device_count()` counts every adapter wgpu enumerates (`anygpu info` lists them; one
physical card may appear once per backend, e.g. Vulkan and OpenGL), and indices are
those of `anygpu.devices()`. anygpu uses one adapter per process: `set_device(N)` picks
adapter N before the first tensor; afterwards only the adapter in use may be named.
There is one random stream (`anygpu.manual_seed`), shared by every device type, so
`manual_seed` and `manual_seed_all` seed it.
"""

from __future__ import annotations

from collections import namedtuple

from .. import ops, placement
from ..runtime import GpuError
from . import amp

__all__ = ["amp", "is_available", "device_count", "current_device", "set_device", "get_device_name",
           "get_device_properties", "get_device_capability", "synchronize", "manual_seed", "manual_seed_all",
           "empty_cache", "is_initialized", "is_bf16_supported", "device"]

device = placement.device

DeviceProperties = namedtuple("DeviceProperties", ["name", "type", "backend", "driver", "index"])


def is_available() -> bool:
    """True when wgpu sees at least one adapter (any kind: anygpu computes on all of them)."""
    try:
        return placement.adapter_count() > 0
    except GpuError:
        return False


def device_count() -> int:
    try:
        return placement.adapter_count()
    except GpuError:
        return 0


def is_initialized() -> bool:
    """True once the process's adapter has been opened (by the first tensor, or set_device)."""
    return ops._default is not None


def _index(op: str, dev) -> int:
    if dev is None:
        return placement.current_index()
    parsed = dev if isinstance(dev, placement.device) else placement.device(dev)
    if parsed.type == "cpu":
        raise ValueError(f"{op}: expected a GPU device (an index, 'cuda:N'), got {parsed}")
    if parsed.index is None:
        return placement.current_index()
    if parsed.index >= placement.adapter_count():
        raise ValueError(f"{op}: adapter index {parsed.index} does not exist; wgpu sees "
                         f"{placement.adapter_count()} adapter(s)")
    return parsed.index


def current_device() -> int:
    """The index of the adapter this process computes on."""
    return placement.current_index()


def set_device(dev) -> None:
    """Choose the process's adapter by index (before the first tensor; see the module docstring)."""
    if isinstance(dev, int) and not isinstance(dev, bool) and dev < 0:
        return  # torch: a negative index is a no-op
    parsed = dev if isinstance(dev, placement.device) else placement.device(dev)
    if parsed.type == "cpu":
        raise ValueError(f"set_device: expected a GPU device (an index, 'cuda:N'), got {parsed}")
    if parsed.index is not None:
        placement.select_adapter(parsed.index, "set_device")


def get_device_properties(dev=None) -> DeviceProperties:
    """Name, adapter type (DiscreteGPU, IntegratedGPU, CPU, ...), backend and driver of an adapter.
    WebGPU does not report total memory or a compute capability."""
    index = _index("get_device_properties", dev)
    info = placement.adapter_infos()[index]
    return DeviceProperties(info.get("device") or info.get("description") or "unknown",
                            info.get("adapter_type", "unknown"), info.get("backend_type", "unknown"),
                            info.get("description", ""), index)


def get_device_name(dev=None) -> str:
    return get_device_properties(dev).name


def get_device_capability(dev=None) -> tuple[int, int]:
    """(0, 0): WebGPU adapters have no CUDA compute capability; scripts that test for one
    (e.g. `>= (8, 0)` for bfloat16) take their portable path."""
    _index("get_device_capability", dev)
    return (0, 0)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """False: anygpu has no bfloat16 tensors."""
    return False


def synchronize(dev=None) -> None:
    """Submit pending GPU work and wait for it (e.g. before reading a timer)."""
    if dev is not None:
        placement.check_device("synchronize", dev)
    ops.gpu().synchronize()


def empty_cache() -> None:
    """Give the adapter's idle pooled buffers back to the driver."""
    if ops._default is not None:
        ops._default.trim()


def manual_seed(seed: int) -> None:
    """Seed anygpu's one random stream (the same as anygpu.manual_seed)."""
    from ..tensor import manual_seed as seed_all
    seed_all(seed)


manual_seed_all = manual_seed
