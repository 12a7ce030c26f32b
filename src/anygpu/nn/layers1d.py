"""torch.nn's 1-D layers: Conv1d, BatchNorm1d, MaxPool1d, AvgPool1d, with torch's
arguments, parameter names and initialisation. Sequences are (N, C, L) (or (C, L));
the functional forms run them as 2-D kernels over a height of 1."""

from __future__ import annotations

from . import functional as F
from .modules import BatchNorm2d, Module, _ConvNd, _MaxPoolNd

__all__ = ["Conv1d", "ConvTranspose1d", "BatchNorm1d", "MaxPool1d", "AvgPool1d"]


def _single(value, name: str) -> int:
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"{name} must be an int or a 1-tuple, got {value!r}")
        value = value[0]
    return int(value)


class Conv1d(_ConvNd):
    """1-D convolution. Input (N, C_in, L) -> (N, C_out, L_out).

    weight (C_out, C_in/groups, k) and bias (C_out,) ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
    fan_in = C_in/groups*k (torch's kaiming_uniform(a=sqrt(5)))."""

    _quote_padding = False  # torch prints 'same' unquoted

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__()
        self._init_conv(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                        padding_mode, transposed=False, tuple_of=lambda value, name: (_single(value, name),))

    def forward(self, input):
        padding = self.padding if isinstance(self.padding, str) else self.padding[0]
        return F.conv1d(input, self.weight, self.bias, self.stride[0], padding, self.dilation[0], self.groups)


class ConvTranspose1d(_ConvNd):
    """Transposed 1-D convolution. Input (N, C_in, L) -> (N, C_out, L_out),
    L_out = (L-1)*stride - 2*padding + dilation*(k-1) + output_padding + 1.

    weight (C_in, C_out/groups, k) (torch's layout), initialised as torch's."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None):
        super().__init__()
        self._init_conv(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                        padding_mode, transposed=True, output_padding=output_padding,
                        tuple_of=lambda value, name: (_single(value, name),))

    def forward(self, input):
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride[0], self.padding[0],
                                  self.output_padding[0], self.groups, self.dilation[0])


class BatchNorm1d(BatchNorm2d):
    """Batch normalisation of (N, C) or (N, C, L) per channel; the same parameters, buffers
    and running-statistics rules as BatchNorm2d."""

    def _check_input_dim(self, input) -> None:
        if input.ndim not in (2, 3):
            raise ValueError(f"BatchNorm1d: expected 2D or 3D input (got {input.ndim}D input of shape "
                             f"{tuple(input.shape)})")


class MaxPool1d(_MaxPoolNd):
    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)


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
