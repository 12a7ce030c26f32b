"""anygpu: train and run neural networks on any GPU through WebGPU and WGSL."""

from .runtime import Buffer, GpuError, LimitError
from .ops import Device, gpu
from .autograd import Tape, TensorId

__version__ = "0.1.0"

__all__ = ["Buffer", "Device", "GpuError", "LimitError", "Tape", "TensorId", "gpu", "__version__"]

from .tensor import (  # noqa: E402  (Layer 2 sits on the device above)
    Tensor, arange, cat, enable_grad, float32, from_numpy, full, full_like, int32, int64, is_grad_enabled,
    log_softmax, long, manual_seed, matmul, no_grad, ones, ones_like, rand, randint, randn, softmax, stack,
    tensor, where, zeros, zeros_like,
)
