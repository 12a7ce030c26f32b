"""Nearest-neighbour upsampling by integer factors (Layer 0) and its backward."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive, grid_1d

__all__ = ["upsample_nearest2d", "upsample_nearest2d_backward"]


def upsample_nearest2d(dev, x, batch: int, channels: int, in_h: int, in_w: int, scale_h: int, scale_w: int):
    """x [batch, channels, in_h, in_w] -> [batch, channels, in_h*scale_h, in_w*scale_w],
    each input value copied into a scale_h x scale_w block (interpolate(mode="nearest"))."""
    op = "upsample_nearest2d"
    check_positive(op, batch=batch, channels=channels, in_h=in_h, in_w=in_w, scale_h=scale_h, scale_w=scale_w)
    check_buffer(op, "x", x, batch * channels * in_h * in_w, "batch*channels*in_h*in_w")
    n = batch * channels * in_h * scale_h * in_w * scale_w
    kernel = dev.kernel(op, load_shader("upsample.wgsl"), 1, 1, "IIIII", entry_point="forward")
    out = dev.empty(n)
    dev.launch(kernel, [x], [out], (n, in_h, in_w, scale_h, scale_w), grid_1d(dev, n))
    return out


def upsample_nearest2d_backward(dev, grad, batch: int, channels: int, in_h: int, in_w: int,
                                scale_h: int, scale_w: int):
    """grad [batch, channels, in_h*scale_h, in_w*scale_w] -> [batch, channels, in_h, in_w]:
    each input's gradient is the sum of the block it was copied into."""
    op = "upsample_nearest2d_backward"
    check_positive(op, batch=batch, channels=channels, in_h=in_h, in_w=in_w, scale_h=scale_h, scale_w=scale_w)
    check_buffer(op, "grad", grad, batch * channels * in_h * scale_h * in_w * scale_w,
                 "batch*channels*in_h*scale_h*in_w*scale_w")
    n = batch * channels * in_h * in_w
    kernel = dev.kernel(op, load_shader("upsample.wgsl"), 1, 1, "IIIII", entry_point="backward")
    out = dev.empty(n)
    dev.launch(kernel, [grad], [out], (n, in_h, in_w, scale_h, scale_w), grid_1d(dev, n))
    return out
