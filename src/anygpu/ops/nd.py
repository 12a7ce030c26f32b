"""N-dimensional helpers for the Tensor layer (Layer 0 ops on flat Buffers plus shapes):
broadcasting binary ops, strided gather/scatter (permute, slicing, expand), reductions
over one axis, dtype casts and select. Shapes are tuples of ints, at most 8 dims."""

from __future__ import annotations

import math

from ..runtime import load_shader
from . import reduce
from ._common import check_buffer, grid_1d
from .elementwise import BINARY, binary

MAX_DIMS = 8

__all__ = ["broadcast_binary", "strided_gather", "strided_scatter", "reduce_axis", "cast", "where"]

# Extra binary expressions that only the N-d layer needs (comparisons give 0/1 floats).
ND_BINARY = dict(BINARY)
ND_BINARY.update({
    # a**b: pow() alone is NaN for a < 0, but torch gives a real result when b is an integer.
    "pow": "select(select(select(pow(abs(a), b), -pow(abs(a), b), abs(b - 2.0 * floor(b * 0.5)) == 1.0),"
           " pow(a, b), a >= 0.0 || b != floor(b)), 1.0, b == 0.0)",
    "maximum": "max(a, b)",
    "minimum": "min(a, b)",
    "eq": "select(0.0, 1.0, a == b)",
    "ne": "select(0.0, 1.0, a != b)",
    "lt": "select(0.0, 1.0, a < b)",
    "le": "select(0.0, 1.0, a <= b)",
    "gt": "select(0.0, 1.0, a > b)",
    "ge": "select(0.0, 1.0, a >= b)",
    "rsub": "b - a",
    "rdiv": "b / a",
})

_REDUCE_OPS = {"sum": 0, "max": 1, "min": 2, "argmax": 3, "argmin": 4}
_CAST_MODES = {("f32", "i32"): 0, ("i32", "f32"): 1, ("u32", "f32"): 2}


def numel(shape) -> int:
    return math.prod(shape)


def contiguous_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def broadcast_shapes(op: str, *shapes) -> tuple[int, ...]:
    """NumPy's broadcast of shapes, or ValueError naming the op and the shapes."""
    ndim = max(len(s) for s in shapes)
    out = []
    for d in range(ndim):
        sizes = {s[d - ndim + len(s)] for s in shapes if d - ndim + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise ValueError(f"{op}: shapes {' and '.join(str(tuple(s)) for s in shapes)} "
                             f"cannot be broadcast together")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _packed(values, fill: int) -> list[int]:
    """Right-align up to 8 values into 8 slots (leading slots = fill)."""
    values = list(values)
    if len(values) > MAX_DIMS:
        raise ValueError(f"at most {MAX_DIMS} dimensions are supported, got {len(values)}")
    return [fill] * (MAX_DIMS - len(values)) + values


def _broadcast_strides(shape, out_shape) -> list[int]:
    strides = contiguous_strides(shape)
    pad = len(out_shape) - len(shape)
    return [0] * pad + [0 if size == 1 else st for size, st in zip(shape, strides)]


def broadcast_binary(dev, name: str, a, a_shape, b, b_shape, alpha: float = 0.0):
    """out = ND_BINARY[name](a, b) with NumPy broadcasting; returns (Buffer, out_shape)."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    out_shape = broadcast_shapes(name, a_shape, b_shape)
    check_buffer(name, "a", a, numel(a_shape))
    check_buffer(name, "b", b, numel(b_shape))
    if a_shape == b_shape and name in BINARY:
        return binary(dev, name, a, b, alpha), out_shape
    n = numel(out_shape)
    out = dev.empty(n)
    if n == 0:
        return out, out_shape
    kernel = dev.kernel("nd_" + name, load_shader("nd_binary.wgsl", EXPR=ND_BINARY[name]), 2, 1, "IIfI" + "I" * 24)
    params = ([n, len(out_shape), alpha, 0] + _packed(out_shape, 1)
              + _packed(_broadcast_strides(a_shape, out_shape), 0)
              + _packed(_broadcast_strides(b_shape, out_shape), 0))
    dev.launch(kernel, [a, b], [out], params, grid_1d(dev, n))
    return out, out_shape


def strided_gather(dev, x, shape, strides, offset: int = 0):
    """out (contiguous, `shape`) [i] = x[offset + sum(coord_d * strides_d)]; dtype kept."""
    n = numel(shape)
    out = dev.empty(n, x.dtype)
    if n == 0:
        return out
    _strided(dev, x, out, shape, strides, offset, mode=0)
    return out


def strided_scatter(dev, src, dst, shape, strides, offset: int = 0):
    """dst[offset + sum(coord_d * strides_d)] = src[i] for every i over `shape` (in place).
    The written positions must be distinct (true for slices and permutations)."""
    if numel(shape):
        _strided(dev, src, dst, shape, strides, offset, mode=1)
    return dst


def _strided(dev, x, out, shape, strides, offset, mode):
    n = numel(shape)
    kernel = dev.kernel("nd_strided", load_shader("nd_strided.wgsl"), 1, 1, "IIII" + "I" * 16)
    params = [n, len(shape), offset, mode] + _packed(shape, 1) + _packed(strides, 0)
    dev.launch(kernel, [x], [out], params, grid_1d(dev, n))


def reduce_axis(dev, x, outer: int, mid: int, inner: int, op: str = "sum"):
    """Reduce x viewed as [outer, mid, inner] over mid -> [outer, inner].
    op: sum, max, min (f32 result) or argmax, argmin (i32 indices)."""
    check_buffer("reduce_" + op, "x", x, outer * mid * inner, "outer*mid*inner")
    if mid < 1:
        raise ValueError(f"reduce_{op}: cannot reduce over an empty dimension")
    if op == "sum" and x.dtype == "f32" and outer * inner:
        # Sums along a contiguous axis go to reduce.py's kernels (a tree of passes for long
        # rows, one thread per short row, column tiles for the first axis): one sum family.
        if inner == 1:
            return reduce.reduce_inner(dev, "a", x, x, outer, mid)
        if outer == 1:
            return reduce.sum_rows(dev, x, mid, inner)
    out = dev.empty(outer * inner, "i32" if op.startswith("arg") else "f32")
    if outer * inner == 0:
        return out
    kernel = dev.kernel("nd_reduce", load_shader("nd_reduce.wgsl"), 1, 1, "IIII")
    dev.launch(kernel, [x], [out], (outer, mid, inner, _REDUCE_OPS[op]), dev.grid(outer * inner))
    return out


def cast(dev, x, dtype: str):
    """Convert a Buffer to another 4-byte dtype (f32 -> i32 truncates toward zero)."""
    if x.dtype == dtype:
        return x
    if (x.dtype, dtype) == ("i32", "u32") or (x.dtype, dtype) == ("u32", "i32"):
        out = dev.copy(x)
        out.dtype = dtype
        return out
    mode = _CAST_MODES.get((x.dtype, dtype))
    if mode is None:
        raise ValueError(f"cast: cannot convert {x.dtype} to {dtype}")
    out = dev.empty(x.len, dtype)
    kernel = dev.kernel("nd_cast", load_shader("nd_cast.wgsl"), 1, 1, "II")
    dev.launch(kernel, [x], [out], (x.len, mode), grid_1d(dev, x.len))
    return out


def where(dev, cond, a, b):
    """out[i] = a[i] if cond[i] != 0 else b[i] (equal lengths)."""
    for name, buf in (("a", a), ("b", b)):
        check_buffer("where", name, buf, cond.len, "len(cond)")
    out = dev.empty(cond.len)
    kernel = dev.kernel("nd_where", load_shader("nd_where.wgsl"), 3, 1, "I")
    dev.launch(kernel, [cond, a, b], [out], (cond.len,), grid_1d(dev, cond.len))
    return out
