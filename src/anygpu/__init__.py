"""anygpu: train and run neural networks on any GPU through WebGPU and WGSL."""

import sys as _sys
from .runtime import Buffer, GpuError, LimitError
from .ops import Device, gpu
from .autograd import Tape, TensorId

__version__ = "0.1.0"

__all__ = ["Buffer", "Device", "GpuError", "LimitError", "Tape", "TensorId", "gpu", "__version__"]

from .tensor import (  # noqa: E402  (Layer 2 sits on the device above)
    Tensor, arange, cat, enable_grad, from_numpy, full, full_like, is_grad_enabled,
    log_softmax, manual_seed, matmul, no_grad, ones, ones_like, rand, randint, randn, softmax, stack,
    tensor, where, zeros, zeros_like,
)
from . import nn, optim  # noqa: E402
from .compiled import CompiledStep, compile  # noqa: E402  (capture and replay of a step)
from .io import TamperedError, nanosign  # noqa: E402
from .io import checkpoint as _checkpoint  # noqa: E402
from .runtime import AdapterInfo  # noqa: E402


def devices() -> list[AdapterInfo]:
    """Every adapter wgpu sees: index, name, backend, type, driver. Pick one with
    ANYGPU_ADAPTER=<index> (or a name substring); cards of the same name differ by index."""
    from .runtime import adapter_infos
    return adapter_infos()


# PyTorch's package shape (`import anygpu as torch`): devices, data, files, precision flags.
from .tensor import inference_mode, is_inference_mode_enabled, set_grad_enabled  # noqa: E402
from .tensor import get_rng_state, initial_seed, seed, set_rng_state  # noqa: E402,F401
from .ops.determinism import (  # noqa: E402,F401  (torch's deterministic-algorithms switch)
    are_deterministic_algorithms_enabled, get_deterministic_debug_mode, is_deterministic_algorithms_warn_only_enabled,
    set_deterministic_debug_mode, use_deterministic_algorithms,
)
from .placement import device  # noqa: E402
from .generator import Generator, default_generator  # noqa: E402
from . import accelerator, amp, backends, cuda, distributed, futures, multiprocessing, special, utils  # noqa: E402  (each a torch.<name> module)
from . import onnx  # noqa: E402  (torch.onnx.export; the onnx package is imported only by export)
from .amp import autocast  # noqa: E402
from .backends import get_float32_matmul_precision, set_float32_matmul_precision  # noqa: E402
from .io.serialization import load, save  # noqa: E402  (torch.save / torch.load; flat state dicts as before)

# torch's module-level functions and dtype names (kept last: `bool`, `float`, `int` are
# torch's dtype names here, as in `torch.bool`).
from .functions import *  # noqa: E402,F401,F403
from .tensor.outputs import channels_last, channels_last_3d, contiguous_format, memory_format, preserve_format  # noqa: E402,F401
from .dtypes import dtype, float32, float16, bfloat16, float64, int32, int64  # noqa: E402,F401
from .dtypes import bool, double, float, half, int, long  # noqa: E402,F401,A004

# torch.autograd.grad / Variable: the autograd package sits below Tensor, so they are attached here.
from .tensor import autograd_grad as _autograd_grad  # noqa: E402
autograd.grad = _autograd_grad  # type: ignore[name-defined]  # noqa: F821 (the anygpu.autograd subpackage)
from .tensor import detect_anomaly as _detect_anomaly, set_detect_anomaly as _set_detect_anomaly  # noqa: E402
from .tensor import is_anomaly_check_nan_enabled, is_anomaly_enabled  # noqa: E402,F401
autograd.detect_anomaly = _detect_anomaly  # type: ignore[name-defined]  # noqa: F821
autograd.set_detect_anomaly = _set_detect_anomaly  # type: ignore[name-defined]  # noqa: F821
from . import linalg  # noqa: E402  (torch.linalg's norms, det, slogdet, solve, inv)
from .linalg import det, logdet, slogdet  # noqa: E402,F401
inverse = linalg.inv
from . import custom_function as _custom_function  # noqa: E402
autograd.Function = _custom_function.Function  # type: ignore[name-defined]  # noqa: F821
autograd.function = _custom_function  # type: ignore[name-defined]  # noqa: F821
_sys.modules.setdefault(__name__ + ".autograd.function", _custom_function)  # from torch.autograd.function import ...
autograd.Variable = lambda data, requires_grad=False, volatile=False: (  # type: ignore[name-defined]  # noqa: F821 (legacy wrapper: the tensor itself)
    data.requires_grad_(True) if requires_grad else data)
# torch.sparse (sparse COO tensors); importing it attaches Tensor.to_sparse / to_dense / is_sparse / layout.
from . import sparse  # noqa: E402
from .sparse import layout, sparse_coo, sparse_coo_tensor, strided  # noqa: E402,F401
from .sparse import matmul  # noqa: E402,F811  (torch.matmul taking sparse operands too; dense ones as before)
from .tensor.outputs import with_out as _with_out  # noqa: E402
matmul = _with_out("matmul", matmul)  # torch.matmul(a, b, out=c)
