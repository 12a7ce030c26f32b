"""More torch.nn modules: RMSNorm, the shrink activations, Softmax2d, ChannelShuffle, the
fixed-mode upsamplers, LocalResponseNorm, the alpha dropouts, LP pooling, LazyLinear, max
unpooling and the multi-class margin losses. Each calls its nn.functional form."""

from __future__ import annotations

import numpy as np

from . import functional as F
from . import init
from .loss import _Loss, _WeightedLoss
from .modules import BatchNorm2d, Linear, Module, Parameter, Upsample, _Norm, _reset_like_torch
from ..tensor import zeros

__all__ = ["RMSNorm", "Softshrink", "Hardshrink", "Softmax2d", "ChannelShuffle", "UpsamplingNearest2d",
           "UpsamplingBilinear2d", "LocalResponseNorm", "AlphaDropout", "FeatureAlphaDropout", "LPPool1d", "LPPool2d",
           "LazyLinear", "MaxUnpool1d", "MaxUnpool2d", "MultiMarginLoss", "MultiLabelMarginLoss", "SyncBatchNorm"]


class RMSNorm(_Norm):
    """Root-mean-square normalisation over the trailing `normalized_shape` dims; weight = 1
    (no bias). eps=None: the machine epsilon of the input's compute type."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self._affine_parameters(elementwise_affine, False, self.normalized_shape)
        del self._parameters["bias"]   # (torch's RMSNorm has no bias entry at all)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            init.ones_(self.weight)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Softshrink(Module):
    """x - lambd where x > lambd, x + lambd where x < -lambd, 0 elsewhere."""

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.softshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return str(self.lambd)


class Hardshrink(Module):
    """x where |x| > lambd, 0 elsewhere."""

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return F.hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softmax2d(Module):
    """Softmax over the channels of (N, C, H, W) or (C, H, W) at each pixel."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return F.softmax(input, -3)


class ChannelShuffle(Module):
    """(N, C, *) -> (N, C, *) with the channels of `groups` groups interleaved."""

    def __init__(self, groups: int):
        super().__init__()
        self.groups = groups

    def forward(self, input):
        return F.channel_shuffle(input, self.groups)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"


class UpsamplingNearest2d(Upsample):
    """Nearest-neighbour resize of (N, C, H, W) to `size` or by `scale_factor`."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, float(scale_factor) if scale_factor else None, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear resize of (N, C, H, W) with align_corners=True, as torch's."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, float(scale_factor) if scale_factor else None, mode="bilinear", align_corners=True)

    def forward(self, input):
        return F.upsample_bilinear(input, self.size, self.scale_factor)


class LocalResponseNorm(Module):
    """Each channel divided by (k + alpha/size * sum of squares of `size` neighbouring channels)^beta."""

    def __init__(self, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0):
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.k = k

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)

    def extra_repr(self) -> str:
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class _AlphaDropoutBase(Module):
    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace  # accepted for PyTorch code; the result is always a new tensor

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class AlphaDropout(_AlphaDropoutBase):
    """Alpha dropout for SELU networks (keeps mean 0, variance 1) in training; identity in eval."""

    def forward(self, input):
        return F.alpha_dropout(input, self.p, self.training)


class FeatureAlphaDropout(_AlphaDropoutBase):
    """Alpha dropout of whole channels of (N, C, *) in training; identity in eval."""

    def forward(self, input):
        return F.feature_alpha_dropout(input, self.p, self.training)


class _LPPoolNd(Module):
    def __init__(self, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False):
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def extra_repr(self) -> str:
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    """(sum of x^p over each window)^(1/p) of (N, C, L) or (C, L)."""

    def forward(self, input):
        return F.lp_pool1d(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


class LPPool2d(_LPPoolNd):
    """(sum of x^p over each window)^(1/p) of (N, C, H, W) or (C, H, W)."""

    def forward(self, input):
        return F.lp_pool2d(input, float(self.norm_type), self.kernel_size, self.stride, self.ceil_mode)


class LazyLinear(Linear):
    """Linear whose in_features comes from the first input's last dim.

    Until that first call weight is a (out_features, 0) placeholder (torch: an
    UninitializedParameter) and in_features is 0; the call makes weight
    (out_features, in_features), initialises weight and bias as Linear does and turns the
    module into a Linear, as torch does. Build optimizers after the first call (the
    placeholder is replaced, as in torch). `lazy.load_state_dict(sd)` before that call
    materialises the weight from the checkpoint's shape; unlike torch, a LazyLinear inside
    a container does not (anygpu's Module.load_state_dict has no per-module load hook):
    call the model once first. The placeholder's state dict entry is a (out_features, 0)
    tensor where torch's is an UninitializedParameter."""

    def __init__(self, out_features: int, bias: bool = True, device=None, dtype=None):
        Module.__init__(self)
        self.in_features = 0
        self.out_features = int(out_features)
        self.weight = Parameter(zeros(self.out_features, 0))
        if bias:
            self.bias = Parameter(zeros(self.out_features))
        else:
            self.register_parameter("bias", None)

    def has_uninitialized_params(self) -> bool:
        return self.in_features == 0

    def initialize_parameters(self, input) -> None:
        if not self.has_uninitialized_params():
            return
        self.in_features = int(input.shape[-1])
        self.weight = Parameter(zeros(self.out_features, self.in_features))
        if self.bias is not None:
            self.bias = Parameter(zeros(self.out_features))
        self.reset_parameters()
        self.__class__ = Linear

    def reset_parameters(self) -> None:
        if not self.has_uninitialized_params():
            _reset_like_torch(self.weight, self.bias)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        shape = np.shape(state_dict["weight"]) if "weight" in state_dict else ()
        if self.has_uninitialized_params() and len(shape) == 2:
            self.in_features = int(shape[1])
            self.weight = Parameter(zeros(self.out_features, self.in_features))
            self.__class__ = Linear
        return Linear.load_state_dict(self, state_dict, strict, assign)

    def forward(self, input):
        self.initialize_parameters(input)
        return F.linear(input, self.weight, self.bias)


class _MaxUnpoolNd(Module):
    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class MaxUnpool1d(_MaxUnpoolNd):
    """The inverse of MaxPool1d: forward(input, indices, output_size=None)."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = _single(kernel_size)
        self.stride = _single(stride if stride is not None else kernel_size)
        self.padding = _single(padding)

    def forward(self, input, indices, output_size=None):
        return F.max_unpool1d(input, indices, self.kernel_size, self.stride, self.padding, output_size)


class MaxUnpool2d(_MaxUnpoolNd):
    """The inverse of MaxPool2d: forward(input, indices, output_size=None)."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = _double(kernel_size)
        self.stride = _double(stride if stride is not None else kernel_size)
        self.padding = _double(padding)

    def forward(self, input, indices, output_size=None):
        return F.max_unpool2d(input, indices, self.kernel_size, self.stride, self.padding, output_size)


def _single(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _double(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


class MultiMarginLoss(_WeightedLoss):
    """Multi-class hinge loss of (N, C) scores against class indices (N,)."""

    def __init__(self, p: int = 1, margin: float = 1.0, weight=None, size_average=None, reduce=None,
                 reduction: str = "mean"):
        super().__init__(weight, size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError(f"MultiMarginLoss: only p == 1 and p == 2 supported, got {p}")
        self.p = p
        self.margin = margin

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, p=self.p, margin=self.margin, weight=self.weight,
                                   reduction=self.reduction)


class MultiLabelMarginLoss(_Loss):
    """Multi-class multi-label hinge loss; target lists class indices, ended by -1."""

    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class SyncBatchNorm(BatchNorm2d):
    """Batch normalisation of (N, C, *) whose statistics torch gathers over every rank.

    Here it runs as one process's BatchNorm, which is what torch does when no process group
    is initialized (or in eval). Training with an initialized group of more than one rank
    raises RuntimeError: syncing the statistics across ranks is not implemented."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, process_group=None, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_group = process_group

    def _check_input_dim(self, input) -> None:
        if input.ndim < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.ndim}D input)")

    def forward(self, input):
        if self.training:
            from .. import distributed

            if distributed.is_initialized() and distributed.get_world_size(self.process_group) > 1:
                raise RuntimeError("SyncBatchNorm: training across more than one rank is not implemented "
                                   "(its statistics would have to be all-reduced); use BatchNorm per rank")
        return super().forward(input)

    @classmethod
    def convert_sync_batchnorm(cls, module: Module, process_group=None) -> Module:
        """`module` with every BatchNorm layer in it replaced by a SyncBatchNorm holding the
        same parameters, buffers and training flag (torch's helper)."""
        converted = module
        if isinstance(module, BatchNorm2d) and not isinstance(module, SyncBatchNorm) and \
                type(module).__name__.startswith("BatchNorm"):
            converted = cls(module.num_features, module.eps, module.momentum, module.affine,
                            module.track_running_stats, process_group)
            if module.affine:
                converted.weight, converted.bias = module.weight, module.bias
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                setattr(converted, name, getattr(module, name))
            converted.training = module.training
        for name, child in module._modules.items():
            if child is not None:
                setattr(converted, name, cls.convert_sync_batchnorm(child, process_group))
        return converted
