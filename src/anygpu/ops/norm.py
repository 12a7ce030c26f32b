"""Group normalisation (Layer 0), forward and backward.

x is [batch, channels, spatial] (spatial = H*W for images; LayerNorm over a last axis
of D is group_norm(x, gamma, beta, rows, D, 1, 1, eps)). gamma and beta are
[channels]. Statistics are per (sample, group) over channels/groups * spatial values,
biased variance, as PyTorch's GroupNorm."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive
from .reduce import sum_rows

__all__ = ["group_norm", "group_norm_backward"]


def _check(op: str, batch: int, channels: int, spatial: int, groups: int, eps: float, **buffers) -> None:
    check_positive(op, batch=batch, channels=channels, spatial=spatial, groups=groups)
    if channels % groups:
        raise ValueError(f"{op}: channels = {channels} is not divisible by groups = {groups}")
    if not eps >= 0:
        raise ValueError(f"{op}: eps must be >= 0, got {eps!r}")
    for name, buf in buffers.items():
        if name in ("gamma", "beta"):
            check_buffer(op, name, buf, channels, "channels")
        else:
            check_buffer(op, name, buf, batch * channels * spatial, "batch*channels*spatial")


def group_norm(dev, x, gamma, beta, batch: int, channels: int, spatial: int, groups: int, eps: float = 1e-5):
    """y = (x - mean) / sqrt(var + eps) * gamma[c] + beta[c], statistics per (sample, group):
    x [batch, channels, spatial] -> y [batch, channels, spatial]."""
    op = "group_norm"
    _check(op, batch, channels, spatial, groups, eps, x=x, gamma=gamma, beta=beta)
    kernel = dev.kernel(op, load_shader("group_norm.wgsl"), 3, 1, "IIIIf")
    y = dev.empty(x.len)
    dev.launch(kernel, [x, gamma, beta], [y], (batch, channels, spatial, groups, float(eps)),
               dev.grid(batch * groups))
    return y


def group_norm_backward(dev, grad_out, x, gamma, batch: int, channels: int, spatial: int, groups: int,
                        eps: float = 1e-5):
    """Gradients of group_norm from grad_out and the forward's input x (both
    [batch, channels, spatial]) -> (dx [batch, channels, spatial], dgamma [channels],
    dbeta [channels]). The statistics are recomputed, so nothing of the forward is kept."""
    op = "group_norm_backward"
    _check(op, batch, channels, spatial, groups, eps, grad_out=grad_out, x=x, gamma=gamma)
    kernel = dev.kernel(op, load_shader("group_norm_backward.wgsl"), 3, 3, "IIIIf")
    dx = dev.empty(x.len)
    # Per-sample channel sums [batch, channels]; summed over the batch below.
    dgamma_part = dev.empty(batch * channels)
    dbeta_part = dev.empty(batch * channels)
    dev.launch(kernel, [grad_out, x, gamma], [dx, dgamma_part, dbeta_part],
               (batch, channels, spatial, groups, float(eps)), dev.grid(batch * groups))
    return dx, sum_rows(dev, dgamma_part, batch, channels), sum_rows(dev, dbeta_part, batch, channels)
