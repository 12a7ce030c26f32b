"""Parameter initialisation, as torch.nn.init: each function fills a Tensor in place
and returns it.

Values are drawn on the host from anygpu's seeded generator
(`anygpu.manual_seed`; pass `generator=` a numpy Generator to use another one) and
written into the tensor's GPU buffer, so every Module that holds the tensor sees them.
"""

from __future__ import annotations

import math

import numpy as np

from ..dtypes import float64
from ..tensor import Tensor, default_generator, float32
from ..tensor.inplace import write_host

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_", "xavier_uniform_",
           "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "trunc_normal_", "orthogonal_", "eye_",
           "dirac_"]


def _write(tensor: Tensor, values) -> Tensor:
    """Overwrite `tensor`'s buffer in place with `values` (broadcast to its shape)."""
    if not isinstance(tensor, Tensor):
        raise TypeError(f"init: expected an anygpu Tensor, got {type(tensor).__name__}")
    if tensor.dtype != float32 and tensor.dtype is not float64:
        raise ValueError(f"init: only float32 and float64 tensors can be initialised, got {tensor.dtype}")
    values = np.broadcast_to(np.asarray(values, dtype=np.float64 if tensor.dtype is float64 else np.float32),
                             tensor.shape)
    write_host(tensor, values)  # (through a view, into its base's buffer)
    return tensor


def _generator(generator) -> np.random.Generator:
    """The NumPy stream behind `generator=`: None (the global one), an anygpu.Generator or a
    NumPy Generator."""
    if generator is None:
        return default_generator()
    return getattr(generator, "numpy_rng", generator)


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) as torch computes them: dim 1 and dim 0 times the receptive field.

    Linear weight (out, in): (in, out). Conv2d weight (out_c, in_c/groups, kh, kw):
    (in_c/groups*kh*kw, out_c*kh*kw). ConvTranspose2d weight (in_c, out_c/groups, kh, kw):
    (out_c/groups*kh*kw, in_c*kh*kw), as in torch."""
    if tensor.ndim < 2:
        raise ValueError(f"init: fan in and fan out need a tensor of at least 2 dims, got shape {tensor.shape}")
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"init: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def calculate_gain(nonlinearity: str, param=None) -> float:
    """The recommended gain for a nonlinearity (torch.nn.init.calculate_gain)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
              "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with values from U(a, b)."""
    return _write(tensor, _generator(generator).uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with values from N(mean, std^2)."""
    return _write(tensor, _generator(generator).normal(mean, std, tensor.shape))


def trunc_normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, a: float = -2.0, b: float = 2.0,
                  generator=None) -> Tensor:
    """Fill with N(mean, std^2) values redrawn until they lie in [a, b]."""
    rng = _generator(generator)
    values = rng.normal(mean, std, tensor.shape)
    outside = (values < a) | (values > b)
    while outside.any():
        values[outside] = rng.normal(mean, std, int(outside.sum()))
        outside = (values < a) | (values > b)
    return _write(tensor, values)


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _write(tensor, float(val))


def zeros_(tensor: Tensor) -> Tensor:
    return _write(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return _write(tensor, 1.0)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """U(-bound, bound) with bound = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), generator)


def kaiming_uniform_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     generator=None) -> Tensor:
    """U(-bound, bound) with bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).

    With a = sqrt(5) (what Linear and Conv2d use) the bound is 1 / sqrt(fan_in)."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    generator=None) -> Tensor:
    """N(0, std^2) with std = gain / sqrt(fan)."""
    fan = _fan(tensor, mode)
    if fan == 0:
        return tensor
    return normal_(tensor, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Fill a (rows, *) tensor with a (semi-)orthogonal matrix times gain, flattened over
    the trailing dims: the Q of a QR decomposition of a normal matrix, signs fixed by R's
    diagonal, as torch does (popular for RNN weights)."""
    if tensor.ndim < 2:
        raise ValueError(f"orthogonal_: only tensors with 2 or more dimensions are supported, got shape "
                         f"{tensor.shape}")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows if rows else 0
    flat = _generator(generator).normal(0.0, 1.0, (rows, cols))
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _write(tensor, (gain * q).reshape(tensor.shape))


def eye_(tensor: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity (ones on the diagonal)."""
    if tensor.ndim != 2:
        raise ValueError(f"eye_: only 2-D tensors are supported, got shape {tensor.shape}")
    return _write(tensor, np.eye(*tensor.shape))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fill a 3-, 4- or 5-D convolution weight with the Dirac delta, so the convolution
    passes its input channels through (per group)."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError(f"dirac_: only 3, 4 or 5-D tensors are supported, got shape {tensor.shape}")
    out_per_group = tensor.shape[0] // groups
    if tensor.shape[0] % groups:
        raise ValueError(f"dirac_: dim 0 ({tensor.shape[0]}) must be divisible by groups ({groups})")
    values = np.zeros(tensor.shape, np.float32)
    centre = tuple(size // 2 for size in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(out_per_group, tensor.shape[1])):
            values[(g * out_per_group + d, d) + centre] = 1.0
    return _write(tensor, values)
