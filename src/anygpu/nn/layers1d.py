"""torch.nn's 1-D layers: Conv1d, BatchNorm1d, MaxPool1d, AvgPool1d, with torch's
arguments, parameter names and initialisation. Sequences are (N, C, L) (or (C, L));
the functional forms run them as 2-D kernels over a height of 1."""

from __future__ import annotations

from . import functional as F
from .modules import BatchNorm2d, Module, Parameter, _reset_like_torch
from ..tensor import zeros

__all__ = ["Conv1d", "BatchNorm1d", "MaxPool1d", "AvgPool1d"]


def _single(value, name: str) -> int:
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"{name} must be an int or a 1-tuple, got {value!r}")
        value = value[0]
    return int(value)


class Conv1d(Module):
    """1-D convolution. Input (N, C_in, L) -> (N, C_out, L_out).

    weight (C_out, C_in/groups, k) and bias (C_out,) ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    fan_in = C_in/groups*k (torch's kaiming_uniform(a=sqrt(5)))."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__()
        if groups <= 0 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv1d: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        if padding_mode != "zeros":
            raise ValueError(f"Conv1d: only padding_mode='zeros' is supported, got {padding_mode!r}")
        self.in_channels = int(in_channels)
        self.out_channels = int(out_channels)
        self.kernel_size = (_single(kernel_size, "kernel_size"),)
        self.stride = (_single(stride, "stride"),)
        self.padding = padding if isinstance(padding, str) else (_single(padding, "padding"),)
        self.dilation = (_single(dilation, "dilation"),)
        self.groups = int(groups)
        self.padding_mode = padding_mode
        self.weight = Parameter(zeros(self.out_channels, self.in_channels // self.groups, self.kernel_size[0]))
        if bias:
            self.bias = Parameter(zeros(self.out_channels))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _reset_like_torch(self.weight, self.bias)

    def forward(self, input):
        padding = self.padding if isinstance(self.padding, str) else self.padding[0]
        return F.conv1d(input, self.weight, self.bias, self.stride[0], padding, self.dilation[0], self.groups)

    def extra_repr(self) -> str:
        text = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,):
            text += f", padding={self.padding}"  # torch prints 'same' unquoted
        if self.dilation != (1,):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        return text


class BatchNorm1d(BatchNorm2d):
    """Batch normalisation of (N, C) or (N, C, L) per channel; the same parameters, buffers
    and running-statistics rules as BatchNorm2d."""

    def _check_input_dim(self, input) -> None:
        if input.ndim not in (2, 3):
            raise ValueError(f"BatchNorm1d: expected 2D or 3D input (got {input.ndim}D input of shape "
                             f"{tuple(input.shape)})")


class MaxPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if stride is not None else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        self.kernel_size = (_single(kernel_size, "kernel_size"),)
        self.stride = (_single(stride if stride is not None else kernel_size, "stride"),)
        self.padding = (_single(padding, "padding"),)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size[0], self.stride[0], self.padding[0], self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
