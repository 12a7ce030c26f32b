"""Layer 0's engine room: the only package that imports wgpu."""

from .device import NO_ADAPTER_HELP, Buffer, Device, Kernel, list_adapters
from .errors import GpuError, LimitError
from .shaders import load_shader

__all__ = ["Buffer", "Device", "Kernel", "GpuError", "LimitError", "list_adapters",
           "load_shader", "NO_ADAPTER_HELP"]
