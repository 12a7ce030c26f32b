"""anygpu: train and run neural networks on any GPU through WebGPU and WGSL."""

from .runtime import Buffer, GpuError, LimitError
from .ops import Device, gpu

__version__ = "0.1.0"

__all__ = ["Buffer", "Device", "GpuError", "LimitError", "gpu", "__version__"]
