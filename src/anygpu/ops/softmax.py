"""Row-wise softmax (Layer 0) and its backward, on f32 or f16 storage (f32 math)."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive
from .row_gen import PARAM_FORMAT, RowConfig, generate

__all__ = ["softmax", "softmax_backward"]

_FLOAT = ("f32", "f16")


def _check_float(op: str, *buffers) -> str:
    dtype = buffers[0].dtype
    for buf in buffers:
        if buf.dtype not in _FLOAT:
            raise ValueError(f"{op}: expected f32 or f16 storage, got {buf.dtype}")
        if buf.dtype != dtype:
            raise ValueError(f"{op}: inputs mix {dtype} and {buf.dtype}; they must share one dtype")
    return dtype


def _pick(dev, kind: str, dtype: str, rows: int, cols: int, config):
    if config is not None:
        if isinstance(config, RowConfig) and not config.serves(cols):
            raise ValueError(f"{kind}: register config {config.name} cannot hold rows of {cols} elements")
        return config
    from . import softmax_tune
    return softmax_tune.choose(dev, kind, (dtype, rows, cols))


def _launch(dev, kind: str, config, inputs, dtype: str, rows: int, cols: int):
    """One workgroup per row: the looped kernel of `config` threads (an int) or the
    register kernel of a RowConfig (ops/row_gen.py)."""
    out = dev.empty(rows * cols, dtype)
    if isinstance(config, RowConfig):
        kernel = dev.kernel(f"{kind}[{config.name}]", generate(kind, config, dtype, cols=cols), len(inputs), 1,
                            PARAM_FORMAT)
        dev.launch(kernel, inputs, [out], (rows, cols, 0.0, 0), dev.grid(rows))
    else:
        kernel = dev.kernel(f"{kind}[{config}]", load_shader(f"{kind}.wgsl", dtype=dtype, WG=config),
                            len(inputs), 1, "II")
        dev.launch(kernel, inputs, [out], (rows, cols), dev.grid(rows))
    return out


def softmax(dev, x, rows: int, cols: int, size=None):
    """Softmax of each row of x [rows, cols] -> [rows, cols] of x's dtype (f32 or f16),
    numerically stable (the row maximum is subtracted first). One workgroup per row;
    size: threads of the looped kernel (an int) or a row_gen.RowConfig; default: the
    tuned choice (ops/softmax_tune.py)."""
    op = "softmax"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "x", x, rows * cols, "rows*cols")
    dtype = _check_float(op, x)
    config = _pick(dev, op, dtype, rows, cols, size)
    return _launch(dev, op, config, [x], dtype, rows, cols)


def softmax_backward(dev, grad, y, rows: int, cols: int, size=None):
    """Gradient of softmax from the forward output y: grad, y [rows, cols] ->
    dx = y * (grad - sum_c grad*y) row by row (size as in softmax)."""
    op = "softmax_backward"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "grad", grad, rows * cols, "rows*cols")
    check_buffer(op, "y", y, rows * cols, "rows*cols")
    dtype = _check_float(op, grad, y)
    config = _pick(dev, op, dtype, rows, cols, size)
    return _launch(dev, op, config, [grad, y], dtype, rows, cols)
