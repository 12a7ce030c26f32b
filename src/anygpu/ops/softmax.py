"""Row-wise softmax (Layer 0) and its backward."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive

__all__ = ["softmax", "softmax_backward"]


def _pick_size(dev, kind: str, x, rows: int, cols: int, size):
    if size is not None:
        return size
    from . import softmax_tune
    return softmax_tune.choose(dev, kind, (x.dtype, rows, cols))


def softmax(dev, x, rows: int, cols: int, size: int | None = None):
    """Softmax of each row of x [rows, cols] -> [rows, cols], numerically stable
    (the row maximum is subtracted first). One workgroup of `size` threads per row
    (default: the tuned choice, see ops/softmax_tune.py)."""
    op = "softmax"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "x", x, rows * cols, "rows*cols")
    size = _pick_size(dev, "softmax", x, rows, cols, size)
    kernel = dev.kernel(f"softmax[{size}]", load_shader("softmax.wgsl", WG=size), 1, 1, "II")
    out = dev.empty(rows * cols)
    dev.launch(kernel, [x], [out], (rows, cols), dev.grid(rows))
    return out


def softmax_backward(dev, grad, y, rows: int, cols: int, size: int | None = None):
    """Gradient of softmax from the forward output y: grad, y [rows, cols] ->
    dx = y * (grad - sum_c grad*y) row by row."""
    op = "softmax_backward"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "grad", grad, rows * cols, "rows*cols")
    check_buffer(op, "y", y, rows * cols, "rows*cols")
    size = _pick_size(dev, "softmax_backward", y, rows, cols, size)
    kernel = dev.kernel(f"softmax_backward[{size}]", load_shader("softmax_backward.wgsl", WG=size), 2, 1, "II")
    out = dev.empty(rows * cols)
    dev.launch(kernel, [grad, y], [out], (rows, cols), dev.grid(rows))
    return out
