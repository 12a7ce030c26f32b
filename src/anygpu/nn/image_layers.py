"""torch.nn's instance norms, padding layers and pixel shuffles, with torch's arguments,
buffers and checks (the functional forms are in nn/functional.py)."""

from __future__ import annotations

import math

from ..tensor import empty, no_grad
from . import functional as F
from . import init
from .modules import BatchNorm2d, Module, Parameter

__all__ = [
    "Unfold", "Fold", "EmbeddingBag", "Bilinear", "AdaptiveAvgPool1d", "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "PixelShuffle", "PixelUnshuffle",
    "ZeroPad1d", "ZeroPad2d", "ConstantPad1d", "ConstantPad2d", "ReflectionPad1d", "ReflectionPad2d",
    "ReplicationPad1d", "ReplicationPad2d", "CircularPad1d", "CircularPad2d",
]


class _InstanceNorm(BatchNorm2d):
    """Per (sample, channel) statistics; affine and track_running_stats off by default, as
    torch's. With track_running_stats, eval uses the running statistics."""

    _dims = 2  # spatial dims

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def _check_input_dim(self, input) -> None:
        if input.ndim not in (self._dims + 1, self._dims + 2):
            raise ValueError(f"{type(self).__name__}: expected {self._dims + 1}D (unbatched) or {self._dims + 2}D "
                             f"input, got {input.ndim}D input of shape {tuple(input.shape)}")

    def forward(self, input):
        self._check_input_dim(input)
        unbatched = input.ndim == self._dims + 1
        x = input.unsqueeze(0) if unbatched else input
        if x.shape[1] != self.num_features and self.affine:
            raise ValueError(f"{type(self).__name__}: expected input with {self.num_features} channels, got shape "
                             f"{tuple(input.shape)}")
        momentum = 0.0 if self.momentum is None else self.momentum  # as torch's
        out = F.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                              self.training or not self.track_running_stats, momentum, self.eps)
        return out.squeeze(0) if unbatched else out

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    """(N, C, L) or (C, L)."""

    _dims = 1


class InstanceNorm2d(_InstanceNorm):
    """(N, C, H, W) or (C, H, W)."""

    _dims = 2


class InstanceNorm3d(_InstanceNorm):
    """(N, C, D, H, W) or (C, D, H, W)."""

    _dims = 3


class Unfold(Module):
    """Sliding blocks as columns (F.unfold)."""

    def __init__(self, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.kernel_size, self.dilation, self.padding, self.stride = kernel_size, dilation, padding, stride

    def forward(self, input):
        return F.unfold(input, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}, padding={self.padding}, stride={self.stride}"


class Fold(Module):
    """Columns summed back into planes (F.fold)."""

    def __init__(self, output_size, kernel_size, dilation=1, padding=0, stride=1):
        super().__init__()
        self.output_size, self.kernel_size = output_size, kernel_size
        self.dilation, self.padding, self.stride = dilation, padding, stride

    def forward(self, input):
        return F.fold(input, self.output_size, self.kernel_size, self.dilation, self.padding, self.stride)

    def extra_repr(self) -> str:
        return (f"output_size={self.output_size}, kernel_size={self.kernel_size}, dilation={self.dilation}, "
                f"padding={self.padding}, stride={self.stride}")


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embedding rows (F.embedding_bag); weight ~ N(0, 1),
    padding_idx's row zeroed, as torch."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False, _weight=None,
                 include_last_offset: bool = False, padding_idx: int | None = None, device=None, dtype=None):
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        if padding_idx is not None:
            if not -self.num_embeddings <= padding_idx < self.num_embeddings:
                raise ValueError(f"EmbeddingBag: padding_idx {padding_idx} is out of range for "
                                 f"{self.num_embeddings} embeddings")
            padding_idx %= self.num_embeddings
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.mode, self.sparse, self.include_last_offset, self.padding_idx = mode, sparse, include_last_offset, \
            padding_idx
        if _weight is not None:
            self.weight = Parameter(_weight)
        else:
            self.weight = Parameter(empty(self.num_embeddings, self.embedding_dim))
            self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset,
                               self.padding_idx)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, mode='{self.mode}'" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class Bilinear(Module):
    """y = x1^T A x2 + b: weight (out, in1, in2) and bias (out) ~ U(-1/sqrt(in1), 1/sqrt(in1)), as torch."""

    def __init__(self, in1_features: int, in2_features: int, out_features: int, bias: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.in1_features, self.in2_features, self.out_features = int(in1_features), int(in2_features), int(
            out_features)
        self.weight = Parameter(empty(self.out_features, self.in1_features, self.in2_features))
        self.register_parameter("bias", Parameter(empty(self.out_features)) if bias else None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.weight.shape[1])
        init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input1, input2):
        return F.bilinear(input1, input2, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class _AdaptivePool(Module):
    _function = "adaptive_avg_pool1d"

    def __init__(self, output_size, return_indices: bool = False):
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, input):
        if self._function.startswith("adaptive_max"):
            return getattr(F, self._function)(input, self.output_size, self.return_indices)
        return getattr(F, self._function)(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class AdaptiveAvgPool1d(_AdaptivePool):
    """Average (N, C, L) over torch's adaptive windows down to `output_size`."""

    def __init__(self, output_size):
        super().__init__(output_size)


class AdaptiveMaxPool1d(_AdaptivePool):
    """The largest element of each adaptive window of (N, C, L)."""

    _function = "adaptive_max_pool1d"


class AdaptiveMaxPool2d(_AdaptivePool):
    """The largest element of each adaptive window of (N, C, H, W)."""

    _function = "adaptive_max_pool2d"


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = int(upscale_factor)

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = int(downscale_factor)

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"


class _PadNd(Module):
    """F.pad with a fixed padding: an int pads every side of the last `_dims` dims."""

    _dims = 2
    _mode = "constant"

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        if isinstance(padding, int):
            padding = (padding,) * (2 * self._dims)
        padding = tuple(int(p) for p in padding)
        if len(padding) != 2 * self._dims:
            raise ValueError(f"{type(self).__name__}: padding must be an int or a {2 * self._dims}-tuple, "
                             f"got {padding!r}")
        self.padding = padding
        self.value = float(value)

    def forward(self, input):
        if self._mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}" + (f", value={self.value}" if type(self).__name__.startswith("Constant") else "")


def _pad_class(name: str, dims: int, mode: str, doc: str, takes_value: bool):
    namespace = {"_dims": dims, "_mode": mode, "__doc__": doc}
    if not takes_value:  # ZeroPad / Reflection / Replication / Circular: the padding only
        namespace["__init__"] = lambda self, padding: _PadNd.__init__(self, padding)
    return type(name, (_PadNd,), namespace)


ZeroPad1d = _pad_class("ZeroPad1d", 1, "constant", "Pads the last dim with zeros.", False)
ZeroPad2d = _pad_class("ZeroPad2d", 2, "constant", "Pads the last two dims with zeros.", False)
ConstantPad1d = _pad_class("ConstantPad1d", 1, "constant", "Pads the last dim with `value`.", True)
ConstantPad2d = _pad_class("ConstantPad2d", 2, "constant", "Pads the last two dims with `value`.", True)
ReflectionPad1d = _pad_class("ReflectionPad1d", 1, "reflect", "Pads the last dim by reflection.", False)
ReflectionPad2d = _pad_class("ReflectionPad2d", 2, "reflect", "Pads the last two dims by reflection.", False)
ReplicationPad1d = _pad_class("ReplicationPad1d", 1, "replicate", "Pads the last dim with its edges.", False)
ReplicationPad2d = _pad_class("ReplicationPad2d", 2, "replicate", "Pads the last two dims with their edges.", False)
CircularPad1d = _pad_class("CircularPad1d", 1, "circular", "Pads the last dim circularly.", False)
CircularPad2d = _pad_class("CircularPad2d", 2, "circular", "Pads the last two dims circularly.", False)
