"""Batch normalisation (Layer 0) over x [batch, channels, spatial], per channel.

Training: `batch_norm_stats` (one workgroup per channel; also updates the running
statistics in place) then `batch_norm_apply`. Evaluation applies the running statistics.
The backward is one per-channel reduction and one elementwise kernel."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive, grid_1d

__all__ = ["batch_norm_stats", "batch_norm_apply", "batch_norm_backward"]


def _check(op, batch, channels, spatial, **buffers):
    check_positive(op, batch=batch, channels=channels, spatial=spatial)
    for name, buf in buffers.items():
        if buf is None:
            continue
        if name in ("x", "grad_out"):
            check_buffer(op, name, buf, batch * channels * spatial, "batch*channels*spatial")
        else:
            check_buffer(op, name, buf, channels, "channels")


def batch_norm_stats(dev, x, batch: int, channels: int, spatial: int, running_mean=None, running_var=None,
                     momentum: float = 0.1):
    """-> (mean [channels], biased var [channels]) of x [batch, channels, spatial] over batch and
    spatial. running_mean / running_var, when given, are updated in place (unbiased var)."""
    op = "batch_norm_stats"
    _check(op, batch, channels, spatial, x=x, running_mean=running_mean, running_var=running_var)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: give both running_mean and running_var, or neither")
    update = running_mean is not None
    if update and batch * spatial < 2:
        raise ValueError(f"{op}: the unbiased running variance needs at least 2 values per channel, "
                         f"got batch*spatial = {batch * spatial}")
    mean, variance = dev.empty(channels), dev.empty(channels)
    if not update:  # unused bindings (flags bit 0 clear)
        running_mean, running_var = dev.empty(1), dev.empty(1)
    kernel = dev.kernel(op, load_shader("batch_norm_stats.wgsl"), 1, 4, "IIIfI")
    dev.launch(kernel, [x], [mean, variance, running_mean, running_var],
               (batch, channels, spatial, float(momentum), int(update)), dev.grid(channels))
    return mean, variance


def batch_norm_apply(dev, x, mean, variance, gamma, beta, batch: int, channels: int, spatial: int,
                     eps: float = 1e-5):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta per channel; gamma, beta [channels] or None."""
    op = "batch_norm_apply"
    _check(op, batch, channels, spatial, x=x, mean=mean, variance=variance, gamma=gamma, beta=beta)
    n = x.len
    y = dev.empty(n)
    flags = (gamma is not None) | ((beta is not None) << 1)
    kernel = dev.kernel(op, load_shader("batch_norm_apply.wgsl"), 5, 1, "IIIfI")
    dev.launch(kernel, [x, mean, variance, gamma if gamma is not None else x, beta if beta is not None else x], [y],
               (n, channels, spatial, float(eps), flags), grid_1d(dev, n))
    return y


def batch_norm_backward(dev, grad_out, x, mean, variance, gamma, batch: int, channels: int, spatial: int,
                        eps: float = 1e-5, training: bool = True):
    """-> (grad_x, grad_gamma [channels], grad_beta [channels]) of batch_norm_apply with the
    given statistics: the batch's own (training: they depend on x) or constants (evaluation)."""
    op = "batch_norm_backward"
    _check(op, batch, channels, spatial, grad_out=grad_out, x=x, mean=mean, variance=variance, gamma=gamma)
    grad_gamma, grad_beta = dev.empty(channels), dev.empty(channels)
    reduce = dev.kernel(op + "_reduce", load_shader("batch_norm_backward_reduce.wgsl"), 4, 2, "IIIf")
    dev.launch(reduce, [grad_out, x, mean, variance], [grad_gamma, grad_beta],
               (batch, channels, spatial, float(eps)), dev.grid(channels))
    n = x.len
    grad_x = dev.empty(n)
    flags = (gamma is not None) | (int(training) << 1)
    apply = dev.kernel(op + "_apply", load_shader("batch_norm_backward_apply.wgsl"), 7, 1, "IIIfI")
    dev.launch(apply, [grad_out, x, mean, variance, gamma if gamma is not None else x, grad_gamma, grad_beta],
               [grad_x], (n, channels, spatial, float(eps), flags), grid_1d(dev, n))
    return grad_x, grad_gamma, grad_beta
