"""torch.backends.mps: True where wgpu sees a Metal adapter (anygpu then computes on it; the
device strings "mps" and "cuda" both name the process's adapter)."""

from .. import placement
from ..runtime import GpuError


def is_available() -> bool:
    try:
        return any(info.get("backend_type", "").lower() == "metal" for info in placement.adapter_infos())
    except GpuError:
        return False


def is_built() -> bool:
    return is_available()
