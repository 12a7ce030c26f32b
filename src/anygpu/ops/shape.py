"""Data movement (Layer 0): transpose and concat."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive, grid_1d

__all__ = ["transpose", "concat"]


def transpose(dev, a, outer: int, d0: int, d1: int, inner: int):
    """Swap the two middle axes: a [outer, d0, d1, inner] -> [outer, d1, d0, inner].

    A matrix transpose is transpose(a, 1, rows, cols, 1)."""
    op = "transpose"
    check_positive(op, outer=outer, d0=d0, d1=d1, inner=inner)
    n = outer * d0 * d1 * inner
    check_buffer(op, "a", a, n, "outer*d0*d1*inner")
    kernel = dev.kernel(op, load_shader("transpose.wgsl"), 1, 1, "IIII")
    out = dev.empty(n)
    dev.launch(kernel, [a], [out], (n, d0, d1, inner), grid_1d(dev, n))
    return out


def concat(dev, a, b, outer: int, a_inner: int, b_inner: int):
    """Concatenate along the last axis: a [outer, a_inner], b [outer, b_inner] ->
    [outer, a_inner + b_inner]. Either inner size may be 0."""
    op = "concat"
    check_positive(op, outer=outer)
    for name, value in (("a_inner", a_inner), ("b_inner", b_inner)):
        if int(value) != value or value < 0:
            raise ValueError(f"{op}: {name} must be an integer >= 0, got {value!r}")
    check_buffer(op, "a", a, outer * a_inner, "outer*a_inner")
    check_buffer(op, "b", b, outer * b_inner, "outer*b_inner")
    n = outer * (a_inner + b_inner)
    out = dev.empty(n)
    if n == 0:
        return out
    kernel = dev.kernel(op, load_shader("concat.wgsl"), 2, 1, "III")
    dev.launch(kernel, [a, b], [out], (n, a_inner, b_inner), grid_1d(dev, n))
    return out
