"""Row-wise softmax (Layer 0) and its backward, on f32 or f16 storage (f32 math); and
their causal forms for attention, which read no mask.

Each op runs one workgroup per row, as the looped kernel (kernels/softmax*.wgsl: a thread
count, the fallback) or as a register kernel (an ops/row_gen.RowConfig: the row read once
into registers and written once), whichever ops/softmax_tune.py chose for the shape. The
causal kinds' kernels of both forms take Params (rows, cols, length) (row_gen.PARAMS);
the plain kinds' register kernels (rows, cols, eps, flags), their looped ones (rows, cols).
"""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive
from .row_gen import RowConfig, generate, param_format

__all__ = ["softmax", "softmax_backward", "softmax_causal", "softmax_causal_backward"]

_FLOAT = ("f32", "f16")


def _check_float(op: str, *buffers) -> str:
    dtype = buffers[0].dtype
    for buf in buffers:
        if buf.dtype not in _FLOAT:
            raise ValueError(f"{op}: expected f32 or f16 storage, got {buf.dtype}")
        if buf.dtype != dtype:
            raise ValueError(f"{op}: inputs mix {dtype} and {buf.dtype}; they must share one dtype")
    return dtype


def _pick(dev, kind: str, problem: tuple, config):
    """`config` (a thread count or a RowConfig that holds the row), or the tuned choice for
    problem (dtype, rows, cols[, length])."""
    if config is None:
        from . import softmax_tune
        return softmax_tune.choose(dev, kind, problem)
    cols = problem[2]
    if isinstance(config, RowConfig):
        if not config.serves(cols):
            raise ValueError(f"{kind}: register config {config.name} cannot hold rows of {cols} elements")
    elif not isinstance(config, int) or isinstance(config, bool):
        raise ValueError(f"{kind}: size must be a thread count (int) or a row_gen.RowConfig, got {config!r}")
    return config


def _launch(dev, kind: str, config, inputs, dtype: str, rows: int, cols: int, length: int | None = None):
    """One workgroup per row: the looped kernel of `config` threads (an int) or the
    register kernel of a RowConfig (ops/row_gen.py); `length` for the causal kinds."""
    out = dev.empty(rows * cols, dtype)
    causal = length is not None
    if isinstance(config, RowConfig):
        code = generate(kind, config, dtype, cols=cols)
        params: tuple = (rows, cols, length) if causal else (rows, cols, 0.0, 0)
        kernel = dev.kernel(f"{kind}[{config.name}]", code, len(inputs), 1, param_format(kind))
    else:
        code = load_shader(f"{kind}.wgsl", dtype=dtype, WG=config)
        params = (rows, cols, length) if causal else (rows, cols)
        kernel = dev.kernel(f"{kind}[{config}]", code, len(inputs), 1, "III" if causal else "II")
    dev.launch(kernel, inputs, [out], params, dev.grid(rows))
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
    config = _pick(dev, op, (dtype, rows, cols), size)
    return _launch(dev, op, config, [x], dtype, rows, cols)


def softmax_backward(dev, grad, y, rows: int, cols: int, size=None):
    """Gradient of softmax from the forward output y: grad, y [rows, cols] ->
    dx = y * (grad - sum_c grad*y) row by row (size as in softmax)."""
    op = "softmax_backward"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "grad", grad, rows * cols, "rows*cols")
    check_buffer(op, "y", y, rows * cols, "rows*cols")
    dtype = _check_float(op, grad, y)
    config = _pick(dev, op, (dtype, rows, cols), size)
    return _launch(dev, op, config, [grad, y], dtype, rows, cols)


def _check_causal(op: str, rows: int, cols: int, length: int, *buffers) -> None:
    check_positive(op, rows=rows, cols=cols, length=length)
    if rows % length:
        raise ValueError(f"{op}: rows ({rows}) must be a multiple of length ({length}): whole blocks of scores")
    for name, buf in buffers:
        check_buffer(op, name, buf, rows * cols, "rows*cols")


def softmax_causal(dev, x, rows: int, cols: int, length: int, size=None):
    """Causal softmax of attention scores x [rows, cols] = [batch, length, cols]: row i of
    each block of `length` rows keeps columns c <= i (torch's is_causal: the lower triangle
    aligned top-left, also where length != cols), the others are 0 in the result. The
    values of softmax(x + mask) with mask 0 there and -inf elsewhere, NaN included (a
    masked NaN or +inf makes the row NaN), without a mask in memory or a pass to add it:
    each masked score is still read once, for that test. size: threads of the looped
    kernel (an int) or a row_gen.RowConfig that holds the row (default: the tuned
    choice, ops/softmax_tune.py)."""
    op = "softmax_causal"
    _check_causal(op, rows, cols, length, ("x", x))
    dtype = _check_float(op, x)
    config = _pick(dev, op, (dtype, rows, cols, length), size)
    return _launch(dev, op, config, [x], dtype, rows, cols, length)


def softmax_causal_backward(dev, grad, y, rows: int, cols: int, length: int, size=None):
    """Gradient of softmax_causal from its output y: grad, y [rows, cols] ->
    dx = y * (grad - sum_c grad*y) row by row, 0 at the masked columns (NaN where torch's
    product through the mask is: a masked grad or the row's sum not finite); a masked y
    never counts (the looped kernel does not read it, a register kernel reads it only
    within a vec4 unit across the diagonal, and drops it) (size as in softmax_causal)."""
    op = "softmax_causal_backward"
    _check_causal(op, rows, cols, length, ("grad", grad), ("y", y))
    dtype = _check_float(op, grad, y)
    config = _pick(dev, op, (dtype, rows, cols, length), size)
    return _launch(dev, op, config, [grad, y], dtype, rows, cols, length)
