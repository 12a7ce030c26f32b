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
from . import nn, optim  # noqa: E402
from .io import TamperedError, nanosign  # noqa: E402
from .io import checkpoint as _checkpoint  # noqa: E402
from .runtime import AdapterInfo  # noqa: E402


def devices() -> list[AdapterInfo]:
    """Every adapter wgpu sees: index, name, backend, type, driver. Pick one with
    ANYGPU_ADAPTER=<index> (or a name substring); cards of the same name differ by index."""
    from .runtime import adapter_infos
    return adapter_infos()



def save(state_dict, path, metadata=None) -> str:
    """Write a state dict (Tensors or arrays) as safetensors, NanoSign-signed, atomically.
    Returns the BLAKE3 hash of the payload."""
    return _checkpoint.save(state_dict, path, metadata=metadata)


def load(path, allow_unsigned: bool = False) -> dict:
    """Verify, strip and parse a signed safetensors file into a dict of Tensors.

    Raises nanosign.TamperedError when the signature does not match, and ValueError for
    an unsigned file unless allow_unsigned=True. Never unpickles."""
    return {name: tensor(array) for name, array in _checkpoint.load(path, allow_unsigned=allow_unsigned).items()}

# torch's module-level functions and dtype names (kept last: `bool`, `float`, `int` are
# torch's dtype names here, as in `torch.bool`).
from .functions import *  # noqa: E402,F401,F403
from .tensor import nonzero, sort, topk  # noqa: E402,F401
from .dtypes import dtype, float32, float16, bfloat16, float64, int32, int64  # noqa: E402,F401
from .dtypes import bool, double, float, half, int, long  # noqa: E402,F401,A004
