"""Backward rules of the Layer-0 ops that need more than one kernel, as plain functions.

Each rule takes the device, the gradient of the op's output (`grad_out`), what the
op read in the forward (buffers and sizes, in the op's own argument order) and
`needs`: one flag per differentiable input saying whether its gradient is wanted.
It returns one gradient Buffer per input, in that order, None where not needed.
The Tape (Layer 1) and the Tensor (Layer 2) both call these.

A rule may return `grad_out` itself, or one Buffer for several inputs: callers treat
gradient Buffers as immutable values (the engine's accumulation makes new Buffers).
Rules that are a single Layer-0 kernel (relu_backward, softmax_backward,
attention_backward, upsample_nearest2d_backward, ...) are called directly instead.
"""

from __future__ import annotations

from ..ops._common import check_pair
from ..ops.conv import conv_output_size, conv_transpose_output_size

__all__ = [
    "add_backward", "sub_backward", "mul_backward", "scale_backward", "mse_loss_backward",
    "matmul_backward", "batch_matmul_backward", "transpose_backward", "concat_backward",
    "add_broadcast_backward", "add_per_col_backward", "conv2d_backward",
    "conv_transpose2d_backward", "group_norm_backward",
]


def add_backward(dev, grad_out, needs=(True, True)):
    """out = a + b: (grad_out, grad_out)."""
    return (grad_out if needs[0] else None, grad_out if needs[1] else None)


def sub_backward(dev, grad_out, needs=(True, True)):
    """out = a - b: (grad_out, -grad_out)."""
    return (grad_out if needs[0] else None, dev.scale(grad_out, -1.0) if needs[1] else None)


def mul_backward(dev, grad_out, a, b, needs=(True, True)):
    """out = a * b: (grad_out * b, grad_out * a)."""
    return (dev.mul(grad_out, b) if needs[0] else None, dev.mul(grad_out, a) if needs[1] else None)


def scale_backward(dev, grad_out, s: float):
    """out = a * s: (grad_out * s,)."""
    return (dev.scale(grad_out, s),)


def mse_loss_backward(dev, grad_out, pred, target, needs=(True, True)):
    """out = mean((pred - target)^2), grad_out 1 element ->
    (2 (pred - target) g / n, -2 (pred - target) g / n) with g = grad_out[0].

    g stays on the GPU (broadcast multiply), so no read-back interrupts the walk."""
    n = pred.len
    diff = dev.sub(pred, target)
    diff_g, _ = dev.broadcast_binary("mul", diff, (n,), grad_out, (1,))
    grad_pred = dev.scale(diff_g, 2.0 / n) if needs[0] else None
    grad_target = dev.scale(diff_g, -2.0 / n) if needs[1] else None
    return grad_pred, grad_target


def batch_matmul_backward(dev, grad_out, a, b, batch: int, m: int, n: int, k: int, needs=(True, True)):
    """C[z] = A[z] @ B[z] (A [batch, m, k], B [batch, k, n]) ->
    (dA = dC @ B^T, dB = A^T @ dC); the transposes are read through strides, never copied."""
    grad_a = dev.matmul_strided(grad_out, b, batch, m, k, n, trans_b=True) if needs[0] else None
    grad_b = dev.matmul_strided(a, grad_out, batch, k, n, m, trans_a=True) if needs[1] else None
    return grad_a, grad_b


def matmul_backward(dev, grad_out, a, b, m: int, n: int, k: int, needs=(True, True)):
    """C = A @ B (A [m, k], B [k, n]) -> (dA [m, k] = dC B^T, dB [k, n] = A^T dC)."""
    return batch_matmul_backward(dev, grad_out, a, b, 1, m, n, k, needs)


def transpose_backward(dev, grad_out, outer: int, d0: int, d1: int, inner: int):
    """out = transpose(a, outer, d0, d1, inner) -> (the transpose back,)."""
    return (dev.transpose(grad_out, outer, d1, d0, inner),)


def concat_backward(dev, grad_out, outer: int, a_inner: int, b_inner: int, needs=(True, True)):
    """out [outer, a_inner + b_inner] = concat(a, b) -> (grad_out[:, :a_inner], grad_out[:, a_inner:])."""
    width = a_inner + b_inner
    grad_a = dev.strided_gather(grad_out, (outer, a_inner), (width, 1), 0) if needs[0] else None
    grad_b = dev.strided_gather(grad_out, (outer, b_inner), (width, 1), a_inner) if needs[1] else None
    return grad_a, grad_b


def add_broadcast_backward(dev, grad_out, outer: int, inner: int, needs=(True, True)):
    """out[o, i] = a[o, i] + b[o] -> (grad_out, sum over i of grad_out)."""
    return (grad_out if needs[0] else None,
            dev.sum_inner(grad_out, outer, inner) if needs[1] else None)


def add_per_col_backward(dev, grad_out, rows: int, cols: int, needs=(True, True)):
    """out[r, c] = a[r, c] + b[c] -> (grad_out, sum over r of grad_out)."""
    return (grad_out if needs[0] else None,
            dev.sum_rows(grad_out, rows, cols) if needs[1] else None)


def conv2d_backward(dev, grad_out, input, weight, batch: int, in_c: int, in_h: int, in_w: int,
                    out_c: int, kh: int, kw: int, stride=1, padding=0, dilation=1, groups: int = 1,
                    needs=(True, True, True)):
    """Gradients of conv2d for (input, weight, bias).

    grad_out [batch, out_c, out_h, out_w] -> (d input [batch, in_c, in_h, in_w],
    d weight [out_c, in_c/groups, kh, kw], d bias [out_c]). The input gradient is exactly
    in_h x in_w even where the window's last step left rows or columns unread
    ((in + 2 pad - dil (k - 1) - 1) mod stride != 0): conv2d_grad_input pads for it."""
    stride = check_pair("conv2d_backward", "stride", stride, 1)
    padding = check_pair("conv2d_backward", "padding", padding, 0)
    dilation = check_pair("conv2d_backward", "dilation", dilation, 1)
    out_h = conv_output_size(in_h, kh, stride[0], padding[0], dilation[0])
    out_w = conv_output_size(in_w, kw, stride[1], padding[1], dilation[1])
    grad_input = grad_weight = grad_bias = None
    if needs[0]:
        grad_input = dev.conv2d_grad_input(grad_out, weight, batch, in_c, in_h, in_w, out_c, out_h, out_w,
                                           kh, kw, stride, padding, dilation, groups)
    if needs[1]:
        grad_weight = dev.conv2d_grad_weight(input, grad_out, batch, in_c, in_h, in_w, out_c, out_h, out_w,
                                             kh, kw, *stride, *padding, *dilation, groups)
    if len(needs) > 2 and needs[2]:
        grad_bias = dev.conv2d_grad_bias(grad_out, batch, out_c, out_h, out_w)
    return grad_input, grad_weight, grad_bias


def conv_transpose2d_backward(dev, grad_out, input, weight, batch: int, in_c: int, in_h: int, in_w: int,
                              out_c: int, kh: int, kw: int, stride=1, padding=0, output_padding=0,
                              dilation=1, groups: int = 1, needs=(True, True, True)):
    """Gradients of conv_transpose2d for (input, weight, bias).

    grad_out [batch, out_c, out_h, out_w] -> (d input [batch, in_c, in_h, in_w],
    d weight [in_c, out_c/groups, kh, kw], d bias [out_c]).

    conv_transpose2d is the input-gradient of a conv2d from out_c to in_c channels with
    the same weight, so its input gradient is that conv2d of grad_out, and its weight
    gradient is that conv2d's weight gradient with the roles of input and grad_out
    swapped. Where output_padding >= stride (allowed when dilation is larger) the conv2d
    reaches one row or column past in_h x in_w: the extra is cropped from d input and
    the input is zero-padded to match for d weight."""
    op = "conv_transpose2d_backward"
    stride = check_pair(op, "stride", stride, 1)
    padding = check_pair(op, "padding", padding, 0)
    output_padding = check_pair(op, "output_padding", output_padding, 0)
    dilation = check_pair(op, "dilation", dilation, 1)
    out_h = conv_transpose_output_size(in_h, kh, stride[0], padding[0], output_padding[0], dilation[0])
    out_w = conv_transpose_output_size(in_w, kw, stride[1], padding[1], output_padding[1], dilation[1])
    # The conv2d of an out_h x out_w map reaches back_h x back_w >= in_h x in_w.
    back_h = conv_output_size(out_h, kh, stride[0], padding[0], dilation[0])
    back_w = conv_output_size(out_w, kw, stride[1], padding[1], dilation[1])
    exact = (back_h, back_w) == (in_h, in_w)
    grad_input = grad_weight = grad_bias = None
    if needs[0]:
        grad_input = dev.conv2d(grad_out, weight, None, batch, out_c, out_h, out_w, in_c, kh, kw,
                                stride, padding, dilation, groups)
        if not exact:
            grad_input = dev.strided_gather(grad_input, (batch * in_c, in_h, in_w),
                                            (back_h * back_w, back_w, 1), 0)
    if needs[1]:
        x = input
        if not exact:
            x = dev.alloc(batch * in_c * back_h * back_w)
            dev.strided_scatter(input, x, (batch * in_c, in_h, in_w), (back_h * back_w, back_w, 1), 0)
        grad_weight = dev.conv2d_grad_weight(grad_out, x, batch, out_c, out_h, out_w, in_c, back_h, back_w,
                                             kh, kw, *stride, *padding, *dilation, groups)
    if len(needs) > 2 and needs[2]:
        grad_bias = dev.conv2d_grad_bias(grad_out, batch, out_c, out_h, out_w)
    return grad_input, grad_weight, grad_bias


def group_norm_backward(dev, grad_out, x, gamma, batch: int, channels: int, spatial: int, groups: int,
                        eps: float = 1e-5, needs=(True, True, True)):
    """Gradients of group_norm for (x, gamma, beta): one kernel computes all three."""
    grads = dev.group_norm_backward(grad_out, x, gamma, batch, channels, spatial, groups, eps)
    return tuple(grad if need else None for grad, need in zip(grads, needs))
