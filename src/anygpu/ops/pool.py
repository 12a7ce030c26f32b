"""2-D pooling (Layer 0): max and average pooling over NCHW planes, and their backward.

Sizes follow PyTorch: out = floor((in + 2*pad - dil*(k-1) - 1) / stride) + 1, or the
ceiling with ceil_mode (dropping a last window that would start in the right padding).
Backward kernels gather over the windows covering each input element: deterministic."""

from __future__ import annotations

from ..runtime import Params, load_shader
from ._common import check_buffer, check_pair, check_positive, grid_1d

__all__ = ["pool2d_output_size", "max_pool2d", "max_pool2d_backward", "avg_pool2d", "avg_pool2d_backward"]

# The kernels' uniform parameters: their WGSL struct and the launch's format.
POOL_PARAMS = Params("n: u32", "in_h: u32", "in_w: u32", "out_h: u32", "out_w: u32", "kh: u32", "kw: u32",
                     "stride_h: u32", "stride_w: u32", "pad_h: u32", "pad_w: u32", "dil_h: u32", "dil_w: u32",
                     "mode: u32", "count_include_pad: u32", "divisor: u32")
_PARAMS = POOL_PARAMS.format()


def pool2d_output_size(op: str, in_h: int, in_w: int, kernel, stride, padding, dilation=1,
                       ceil_mode: bool = False) -> tuple[int, int]:
    """(out_h, out_w) of a pooling window, or ValueError naming the op and the sizes."""
    kh, kw = check_pair(op, "kernel_size", kernel, 1)
    sh, sw = check_pair(op, "stride", stride, 1)
    ph, pw = check_pair(op, "padding", padding, 0)
    dh, dw = check_pair(op, "dilation", dilation, 1)
    if ph > kh // 2 or pw > kw // 2:
        raise ValueError(f"{op}: padding {(ph, pw)} must be at most half of kernel_size {(kh, kw)}")
    sizes = []
    for size, k, s, p, d in ((in_h, kh, sh, ph, dh), (in_w, kw, sw, pw, dw)):
        span = size + 2 * p - d * (k - 1) - 1
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= size + p:
            out -= 1  # the last window would start in the right padding
        sizes.append(out)
    if min(sizes) < 1:
        raise ValueError(f"{op}: input of size {(in_h, in_w)} is too small for kernel_size {(kh, kw)} "
                         f"with padding {(ph, pw)} and dilation {(dh, dw)} (output would be {tuple(sizes)})")
    return sizes[0], sizes[1]


def _params(n, in_h, in_w, out_h, out_w, kernel, stride, padding, dilation, mode,
            count_include_pad=True, divisor=0):
    kh, kw = check_pair("pool2d", "kernel_size", kernel, 1)
    sh, sw = check_pair("pool2d", "stride", stride, 1)
    ph, pw = check_pair("pool2d", "padding", padding, 0)
    dh, dw = check_pair("pool2d", "dilation", dilation, 1)
    return (n, in_h, in_w, out_h, out_w, kh, kw, sh, sw, ph, pw, dh, dw, mode,
            int(bool(count_include_pad)), int(divisor or 0))


def _check(op, x, planes, in_h, in_w):
    check_positive(op, planes=planes, in_h=in_h, in_w=in_w)
    check_buffer(op, "input", x, planes * in_h * in_w, "planes*in_h*in_w")


def max_pool2d(dev, x, planes: int, in_h: int, in_w: int, kernel, stride, padding=0, dilation=1,
               ceil_mode: bool = False):
    """x [planes, in_h, in_w] -> (values [planes, out_h, out_w], indices i32 (ih*in_w + iw), out_h, out_w)."""
    _check("max_pool2d", x, planes, in_h, in_w)
    out_h, out_w = pool2d_output_size("max_pool2d", in_h, in_w, kernel, stride, padding, dilation, ceil_mode)
    n = planes * out_h * out_w
    out, indices = dev.empty(n), dev.empty(n, "i32")
    kernel_ = dev.kernel("pool2d", load_shader("pool2d.wgsl", **POOL_PARAMS.subs()), 1, 2, _PARAMS)
    dev.launch(kernel_, [x], [out, indices],
               _params(n, in_h, in_w, out_h, out_w, kernel, stride, padding, dilation, 0), grid_1d(dev, n))
    return out, indices, out_h, out_w


def max_pool2d_backward(dev, grad_out, indices, planes: int, in_h: int, in_w: int, out_h: int, out_w: int,
                        kernel, stride, padding=0, dilation=1):
    """grad_in [planes, in_h, in_w]: grad_out routed to each window's recorded max."""
    check_buffer("max_pool2d_backward", "grad_out", grad_out, planes * out_h * out_w, "planes*out_h*out_w")
    check_buffer("max_pool2d_backward", "indices", indices, planes * out_h * out_w, "planes*out_h*out_w")
    n = planes * in_h * in_w
    grad_in = dev.empty(n)
    kernel_ = dev.kernel("pool2d_backward", load_shader("pool2d_backward.wgsl", **POOL_PARAMS.subs()), 2, 1, _PARAMS)
    dev.launch(kernel_, [grad_out, indices], [grad_in],
               _params(n, in_h, in_w, out_h, out_w, kernel, stride, padding, dilation, 0), grid_1d(dev, n))
    return grad_in


def avg_pool2d(dev, x, planes: int, in_h: int, in_w: int, kernel, stride, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None):
    """x [planes, in_h, in_w] -> (mean of each window [planes, out_h, out_w], out_h, out_w)."""
    _check("avg_pool2d", x, planes, in_h, in_w)
    if divisor_override is not None and int(divisor_override) < 1:
        raise ValueError(f"avg_pool2d: divisor_override must be a positive integer, got {divisor_override!r}")
    out_h, out_w = pool2d_output_size("avg_pool2d", in_h, in_w, kernel, stride, padding, 1, ceil_mode)
    n = planes * out_h * out_w
    out = dev.empty(n)
    unused_indices = dev.empty(1, "i32")
    kernel_ = dev.kernel("pool2d", load_shader("pool2d.wgsl", **POOL_PARAMS.subs()), 1, 2, _PARAMS)
    dev.launch(kernel_, [x], [out, unused_indices],
               _params(n, in_h, in_w, out_h, out_w, kernel, stride, padding, 1, 1,
                       count_include_pad, divisor_override), grid_1d(dev, n))
    return out, out_h, out_w


def avg_pool2d_backward(dev, grad_out, planes: int, in_h: int, in_w: int, out_h: int, out_w: int,
                        kernel, stride, padding=0, count_include_pad: bool = True,
                        divisor_override: int | None = None):
    """grad_in [planes, in_h, in_w]: each window's grad_out spread evenly over it."""
    check_buffer("avg_pool2d_backward", "grad_out", grad_out, planes * out_h * out_w, "planes*out_h*out_w")
    n = planes * in_h * in_w
    grad_in = dev.empty(n)
    unused_indices = dev.empty(1, "i32")
    kernel_ = dev.kernel("pool2d_backward", load_shader("pool2d_backward.wgsl", **POOL_PARAMS.subs()), 2, 1, _PARAMS)
    dev.launch(kernel_, [grad_out, unused_indices], [grad_in],
               _params(n, in_h, in_w, out_h, out_w, kernel, stride, padding, 1, 1,
                       count_include_pad, divisor_override), grid_1d(dev, n))
    return grad_in
