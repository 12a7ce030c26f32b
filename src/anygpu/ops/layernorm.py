"""Layer normalisation (Layer 0) over the trailing `cols` elements of each row, and its backward."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive

__all__ = ["layer_norm", "layer_norm_backward"]


def _check_affine(op, gamma, beta, cols):
    if gamma is not None:
        check_buffer(op, "gamma", gamma, cols, "cols")
    if beta is not None:
        check_buffer(op, "beta", beta, cols, "cols")


def layer_norm(dev, x, gamma, beta, rows: int, cols: int, eps: float = 1e-5):
    """x [rows, cols] -> (y [rows, cols], stats [rows, 2] = (mean, 1/sqrt(var + eps))).

    gamma, beta: [cols] Buffers or None (no scale / no shift). Biased variance, as torch."""
    check_positive("layer_norm", rows=rows, cols=cols)
    check_buffer("layer_norm", "x", x, rows * cols, "rows*cols")
    _check_affine("layer_norm", gamma, beta, cols)
    flags = (gamma is not None) | ((beta is not None) << 1)
    y, stats = dev.empty(rows * cols), dev.empty(2 * rows)
    kernel = dev.kernel("layer_norm", load_shader("layer_norm.wgsl"), 3, 2, "IIfI")
    dev.launch(kernel, [x, gamma if gamma is not None else x, beta if beta is not None else x], [y, stats],
               (rows, cols, float(eps), flags), dev.grid(rows))
    return y, stats


def layer_norm_backward(dev, grad_out, x, gamma, stats, rows: int, cols: int, want_affine: bool = True):
    """-> (grad_x [rows, cols], grad_gamma [cols] or None, grad_beta [cols] or None).

    stats is the forward's [rows, 2]; the affine gradients are computed when want_affine."""
    check_positive("layer_norm_backward", rows=rows, cols=cols)
    for name, buf, n, formula in (("grad_out", grad_out, rows * cols, "rows*cols"),
                                  ("x", x, rows * cols, "rows*cols"), ("stats", stats, 2 * rows, "2*rows")):
        check_buffer("layer_norm_backward", name, buf, n, formula)
    _check_affine("layer_norm_backward", gamma, None, cols)
    flags = (gamma is not None) | (4 if want_affine else 0)
    grad_x = dev.empty(rows * cols)
    grad_out_xhat = dev.empty(rows * cols if want_affine else 1)
    kernel = dev.kernel("layer_norm_backward", load_shader("layer_norm_backward.wgsl"), 4, 2, "IIfI")
    dev.launch(kernel, [grad_out, x, gamma if gamma is not None else x, stats], [grad_x, grad_out_xhat],
               (rows, cols, 0.0, flags), dev.grid(rows))
    if not want_affine:
        return grad_x, None, None
    grad_gamma = dev.reduce_axis(grad_out_xhat, 1, rows, cols, "sum")
    grad_beta = dev.reduce_axis(grad_out, 1, rows, cols, "sum")
    return grad_x, grad_gamma, grad_beta
