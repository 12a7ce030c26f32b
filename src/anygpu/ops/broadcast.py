"""Broadcast additions (Layer 0): a bias added along one axis of a 2-D array.

Their backward for the bias is a sum over the broadcast axis: sum_inner for
add_broadcast, sum_rows for add_per_col (see ops/reduce.py)."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive, grid_1d

__all__ = ["add_broadcast", "add_per_col"]


def _add_broadcast(dev, op: str, b_index: str, a, b, width: int):
    kernel = dev.kernel(op, load_shader("broadcast.wgsl", B_INDEX=b_index), 2, 1, "II")
    out = dev.empty(a.len)
    dev.launch(kernel, [a, b], [out], (a.len, width), grid_1d(dev, a.len))
    return out


def add_broadcast(dev, a, b, outer: int, inner: int):
    """a [outer, inner] + b [outer] broadcast along inner: out[o, i] = a[o, i] + b[o].

    (A per-channel bias on [batch*channels, spatial].)"""
    op = "add_broadcast"
    check_positive(op, outer=outer, inner=inner)
    check_buffer(op, "a", a, outer * inner, "outer*inner")
    check_buffer(op, "b", b, outer, "outer")
    return _add_broadcast(dev, op, "i / P.width", a, b, inner)


def add_per_col(dev, a, b, rows: int, cols: int):
    """a [rows, cols] + b [cols] added to every row: out[r, c] = a[r, c] + b[c].

    (A linear layer's bias.)"""
    op = "add_per_col"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "a", a, rows * cols, "rows*cols")
    check_buffer(op, "b", b, cols, "cols")
    return _add_broadcast(dev, op, "i % P.width", a, b, cols)
