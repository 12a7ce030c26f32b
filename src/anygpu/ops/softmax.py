"""Row-wise softmax (Layer 0) and its backward."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive

__all__ = ["softmax", "softmax_backward"]


def _workgroup_size(cols: int) -> int:
    """Threads per row: a power of two from 32 to 256, no wider than the row needs."""
    size = 32
    while size < cols and size < 256:
        size *= 2
    return size


def softmax(dev, x, rows: int, cols: int):
    """Softmax of each row of x [rows, cols] -> [rows, cols], numerically stable
    (the row maximum is subtracted first). One workgroup per row."""
    op = "softmax"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "x", x, rows * cols, "rows*cols")
    size = _workgroup_size(cols)
    kernel = dev.kernel(f"softmax[{size}]", load_shader("softmax.wgsl", WG=size), 1, 1, "II")
    out = dev.empty(rows * cols)
    dev.launch(kernel, [x], [out], (rows, cols), dev.grid(rows))
    return out


def softmax_backward(dev, grad, y, rows: int, cols: int):
    """Gradient of softmax from the forward output y: grad, y [rows, cols] ->
    dx = y * (grad - sum_c grad*y) row by row."""
    op = "softmax_backward"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "grad", grad, rows * cols, "rows*cols")
    check_buffer(op, "y", y, rows * cols, "rows*cols")
    size = _workgroup_size(cols)
    kernel = dev.kernel(f"softmax_backward[{size}]", load_shader("softmax_backward.wgsl", WG=size), 2, 1, "II")
    out = dev.empty(rows * cols)
    dev.launch(kernel, [grad, y], [out], (rows, cols), dev.grid(rows))
    return out
