"""N-dimensional helpers for the Tensor layer (Layer 0 ops on flat Buffers plus shapes):
broadcasting binary ops, strided gather/scatter (permute, slicing, expand), reductions
over one axis, dtype casts and select. Shapes are tuples of ints, at most 8 dims.
Every op here takes Buffers of any dtype its expressions exist for (see elementwise.py
and runtime/dtypes.py): f32, f16 (computed in f32), i32, bool, and u32 where it makes sense."""

from __future__ import annotations

import math

from ..runtime import Params
from ..runtime.dtypes import DTYPES
from . import broadcast, fusion, reduce
from ._common import check_buffer, grid_1d
from .elementwise import UNARY_PARAMS, binary, check_same_dtype, expression, out_dtype_of, scalar_param, source

MAX_DIMS = 8

__all__ = ["broadcast_binary", "strided_gather", "strided_scatter", "reduce_axis", "cast", "where", "sum_dims",
           "sum_to_shape"]

_REDUCE_OPS = {"sum": 0, "max": 1, "min": 2, "argmax": 3, "argmin": 4}

ND_BINARY_PARAMS = Params("n: u32", "ndim: u32", "alpha: C", "pad: u32",
                          "shape: u32[8]", "a_strides: u32[8]", "b_strides: u32[8]")
STRIDED_PARAMS = Params("n: u32", "ndim: u32", "offset: u32", "mode: u32", "shape: u32[8]", "strides: u32[8]")
REDUCE_PARAMS = Params("outer: u32", "mid: u32", "inner: u32", "op: u32")
COUNT_PARAMS = Params("n: u32")


def words(dtype: str) -> str:
    """The dtype a kernel that only moves elements uses: u32 words for every 4-byte dtype
    (one pipeline serves them all), f16 for f16."""
    return "f16" if DTYPES[dtype].itemsize == 2 else "u32"


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


def merged_dims(shape, *strides_lists) -> tuple[tuple, list[tuple]]:
    """The same index map over fewer dims: dims of size 1 dropped, and each dim merged into
    the one before it where every strides list steps over it contiguously (outer stride =
    inner stride * inner size), e.g. a (4, 2, 32, 32) walk of a contiguous array against a
    (32, 32) one broadcast over the first two dims is the (8, 1024) walk with strides
    (1024, 1) and (0, 1). Kernels that decompose an index dim by dim do fewer divisions."""
    dims = [(size, [st[d] for st in strides_lists]) for d, size in enumerate(shape) if size != 1]
    merged: list = []
    for size, strides in dims:
        if merged:
            outer_size, outer = merged[-1]
            if all(o == s * size for o, s in zip(outer, strides)):
                merged[-1] = (outer_size * size, strides)
                continue
        merged.append((size, strides))
    if not merged:
        return (1,), [(0,) for _ in strides_lists]
    return (tuple(size for size, _ in merged),
            [tuple(strides[k] for _, strides in merged) for k in range(len(strides_lists))])


def _broadcast_strides(shape, out_shape) -> list[int]:
    strides = contiguous_strides(shape)
    pad = len(out_shape) - len(shape)
    return [0] * pad + [0 if size == 1 else st for size, st in zip(shape, strides)]


def broadcast_binary(dev, name: str, a, a_shape, b, b_shape, alpha: float = 0.0, out_dtype: str | None = None):
    """out = f(a, b) with NumPy broadcasting for the binary op `name` of the Buffers' dtype
    (see elementwise.binary); returns (Buffer, out_shape)."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    out_shape = broadcast_shapes(name, a_shape, b_shape)
    check_buffer(name, "a", a, numel(a_shape))
    check_buffer(name, "b", b, numel(b_shape))
    dtype = check_same_dtype(name, a, b)
    if a_shape == b_shape:
        return binary(dev, name, a, b, alpha, out_dtype), out_shape
    expr = expression(name, name, dtype, 2)
    result = out_dtype_of(name, dtype, out_dtype)
    n = numel(out_shape)
    if n == 0:
        return dev.empty(n, result), out_shape
    shape, (a_strides, b_strides) = merged_dims(out_shape, _broadcast_strides(a_shape, out_shape),
                                                _broadcast_strides(b_shape, out_shape))
    if name == "add" and dtype == result == "f32" and len(shape) == 2:
        # A bias-like add (one operand whole, the other repeated along one axis) is the 2-D
        # broadcast kernel: one index division per element rather than one per dim.
        rows, cols = shape
        for whole, part, whole_strides, part_strides in ((a, b, a_strides, b_strides),
                                                         (b, a, b_strides, a_strides)):
            if whole_strides != (cols, 1):
                continue
            if part_strides == (0, 1):
                return broadcast.add_per_col(dev, whole, part, rows, cols), out_shape
            if part_strides == (1, 0):
                return broadcast.add_broadcast(dev, whole, part, rows, cols), out_shape
    out = dev.empty(n, result)
    kernel = dev.kernel("nd_" + name, source("nd_binary.wgsl", expr, ND_BINARY_PARAMS, dtype, result), 2, 1,
                        ND_BINARY_PARAMS.format(dtype))
    params = ([n, len(shape), scalar_param(dtype, alpha), 0] + _packed(shape, 1)
              + _packed(a_strides, 0) + _packed(b_strides, 0))
    dev.launch(kernel, [a, b], [out], params, grid_1d(dev, n))
    return out, out_shape


def sum_dims(dev, buf, shape, dims):
    """Sum a contiguous buffer of `shape` over `dims` (kept as size 1).

    Neighbouring reduced dims are merged into one axis, so e.g. a sum over (H, W)
    is one reduction over H*W rather than two; a sum over everything uses the
    tree reduction of `sum_all`."""
    shape = list(shape)
    dims = sorted(d for d in set(dims) if shape[d] != 1)
    if not dims:
        return buf
    if buf.dtype == "f32" and all(shape[d] == 1 for d in range(len(shape)) if d not in dims):
        return reduce.sum_all(dev, buf)
    runs, start = [], dims[0]
    for prev, d in zip(dims, dims[1:] + [None]):
        if d != prev + 1:
            runs.append((start, prev))
            start = d
    for first, last in reversed(runs):
        buf = reduce_axis(dev, buf, numel(shape[:first]), numel(shape[first:last + 1]), numel(shape[last + 1:]),
                          "sum")
        for d in range(first, last + 1):
            shape[d] = 1
    return buf


def sum_to_shape(dev, grad, grad_shape, shape):
    """Sum a broadcast gradient of `grad_shape` back down to `shape` (the inverse of broadcasting)."""
    grad_shape, shape = tuple(grad_shape), tuple(shape)
    if grad_shape == shape:
        return grad
    return sum_dims(dev, grad, grad_shape, broadcast_dims(grad_shape, shape))


def broadcast_dims(grad_shape, shape) -> list[int]:
    """The dims of `grad_shape` that broadcasting `shape` to it expanded (summed to undo it)."""
    padded = (1,) * (len(grad_shape) - len(shape)) + tuple(shape)
    return [d for d, (g, s) in enumerate(zip(grad_shape, padded)) if s == 1 and g != 1]


def strided_gather(dev, x, shape, strides, offset: int = 0, dtype: str | None = None):
    """out (contiguous, `shape`) [i] = x[offset + sum(coord_d * strides_d)]; dtype kept, or
    converted on the way between f32 and f16 (`dtype`: a strided view's cast in one kernel)."""
    n = numel(shape)
    if dtype is not None and dtype != x.dtype and {x.dtype, dtype} != {"f32", "f16"}:
        raise ValueError(f"strided_gather: converts between f32 and f16 only, not {x.dtype} to {dtype}")
    out = dev.empty(n, dtype or x.dtype)
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


# The units a strided copy may move per thread, widest first, by element size (plain copies)
# or by (dtype, out_dtype) (conversions): (elements per unit, WGSL type read, type written).
# A plain copy moves whole words, so one of f16 in units needs no f16 support in the kernel.
_UNITS = {4: ((4, "vec4<u32>", "vec4<u32>"), (2, "vec2<u32>", "vec2<u32>")),
          2: ((8, "vec4<u32>", "vec4<u32>"), (4, "vec2<u32>", "vec2<u32>"), (2, "u32", "u32")),
          ("f32", "f16"): ((4, "vec4<f32>", "vec4<f16>"),),
          ("f16", "f32"): ((4, "vec4<f16>", "vec4<f32>"),)}


def strided_units(shape, strides, offset: int, dtype: str, out_dtype: str | None = None):
    """How the strided copy of `dtype` elements over `shape`, `strides`, `offset` (converted
    to `out_dtype` on the way: f32 <-> f16 only) is launched: (in_type, out_type, per_unit,
    shape, strides, offset), the WGSL types of the elements the kernel reads and writes, how
    many of the copy's elements each holds, and the walk counted in them (dims merged).

    Where the innermost dim is contiguous and its size, the offset and every other stride
    are multiples of a unit, a thread moves one unit: vec4<u32> (4 words, 8 halves), else
    vec2<u32> (2 words, 4 halves), else u32 (2 halves); a conversion vec4<f32> <-> vec4<f16>.
    Else one element a thread (u32 words for every 4-byte dtype). E.g. a head split's q of
    [B, T, 3, H, 64] f16 -> [B, H, T, 64] is 8 halves a thread: an eighth of the index maths
    and 16-byte loads and stores rather than one element and 2-byte ones."""
    shape, (strides,) = merged_dims(shape, strides)
    if out_dtype is None or out_dtype == dtype:
        in_scalar = out_scalar = words(dtype)
        units = _UNITS.get(DTYPES[dtype].itemsize, ())
    else:
        in_scalar, out_scalar = dtype, out_dtype
        units = _UNITS.get((dtype, out_dtype), ())
    if strides[-1] == 1:
        for per_unit, in_type, out_type in units:
            if shape[-1] % per_unit == 0 and offset % per_unit == 0 and all(s % per_unit == 0 for s in strides[:-1]):
                inner = shape[-1] // per_unit
                outer_strides = tuple(s // per_unit for s in strides[:-1])
                if inner == 1 and len(shape) > 1:  # one unit a row: a dim less to walk
                    return in_type, out_type, per_unit, shape[:-1], outer_strides, offset // per_unit
                return in_type, out_type, per_unit, shape[:-1] + (inner,), outer_strides + (1,), offset // per_unit
    return in_scalar, out_scalar, 1, shape, strides, offset


def _strided(dev, x, out, shape, strides, offset, mode):
    converts = {x.dtype, out.dtype} == {"f32", "f16"} and mode == 0
    if DTYPES[x.dtype].itemsize != DTYPES[out.dtype].itemsize and not converts:
        raise ValueError(f"strided copy: {x.dtype} elements cannot go into a {out.dtype} buffer")
    in_type, out_type, _, shape, strides, offset = strided_units(
        shape, strides, offset, x.dtype, out.dtype if converts else None)
    kernel = dev.op_kernels.get(("nd_strided", in_type, out_type))
    if kernel is None:  # first use on this device
        name = "nd_strided_" + in_type if in_type == out_type else f"nd_strided_{in_type}_{out_type}"
        enable = DTYPES["f16"].enable if "f16" in in_type + out_type else ""
        text = source("nd_strided.wgsl", "", STRIDED_PARAMS, T=in_type, OUT_T=out_type, ENABLE=enable)
        kernel = dev.op_kernels["nd_strided", in_type, out_type] = dev.kernel(
            name.replace("<", "").replace(">", ""), text, 1, 1, STRIDED_PARAMS.format())
    units = numel(shape)
    params = [units, len(shape), offset, mode] + _packed(shape, 1) + _packed(strides, 0)
    dev.launch(kernel, [x], [out], params, grid_1d(dev, units))


def reduce_axis(dev, x, outer: int, mid: int, inner: int, op: str = "sum"):
    """Reduce x viewed as [outer, mid, inner] over mid -> [outer, inner].
    op: sum, max, min (x's dtype; the sum of bool counts in i32; f16 accumulates in f32)
    or argmax, argmin (i32 indices)."""
    check_buffer("reduce_" + op, "x", x, outer * mid * inner, "outer*mid*inner")
    if op not in _REDUCE_OPS:
        raise ValueError(f"reduce: op must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    if mid < 1:
        raise ValueError(f"reduce_{op}: cannot reduce over an empty dimension")
    if op == "sum" and x.dtype in ("f32", "f16") and outer * inner:
        # Sums along a contiguous axis go to reduce.py's kernels (a tree of passes for long
        # rows, one thread per short row, column tiles for the first axis): one sum family.
        if inner == 1 and x.dtype == "f32":
            return reduce.reduce_inner(dev, "a", x, x, outer, mid)
        if outer == 1:
            return reduce.sum_rows(dev, x, mid, inner)
    dtype = x.dtype
    if dtype == "u32":
        raise ValueError(f"reduce_{op}: u32 buffers hold raw words; cast to i32 or f32 first")
    if op.startswith("arg"):
        result = "i32"
    else:
        result = "i32" if (dtype, op) == ("bool", "sum") else dtype
    out = dev.empty(outer * inner, result)
    if outer * inner == 0:
        return out
    nan_test = "(bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u" if DTYPES[dtype].kind == "float" else "false"
    kernel = dev.kernel("nd_reduce", source("nd_reduce.wgsl", "", REDUCE_PARAMS, dtype, result, NAN_TEST=nan_test),
                        1, 1, REDUCE_PARAMS.format(dtype))
    dev.launch(kernel, [x], [out], (outer, mid, inner, _REDUCE_OPS[op]), dev.grid(outer * inner))
    return out


# How a value of one kind becomes another (`v` is the stored element, converted to the
# source's compute type first). bool is 1 for any nonzero value (NaN too, as in torch).
_CAST_EXPR = {
    "bool": "select(0u, 1u, v != {C}(0))",
    # A bit test: NaN is nonzero, but `v != 0` may be folded to false for it (lavapipe does),
    # and NVIDIA compares f32 subnormals as zero (flushed): torch and numpy take both as True.
    "float_bool": "select(0u, 1u, (bitcast<u32>(v) & 0x7fffffffu) != 0u)",
    "from_bool": "{OUT_C}(v)",
    "bits": "bitcast<{OUT_C}>(v)",
    "convert": "{OUT_C}(v)",
}


def cast(dev, x, dtype: str):
    """Convert a Buffer to another dtype, as torch's .to(): f32/f16 -> i32 truncates toward
    zero, anything -> bool is `!= 0`, bool -> numbers is 0/1; i32 <-> u32 keep the bits.
    f32 <-> f16 is deferred and fused with the elementwise ops around it (fusion.py)."""
    if x.dtype == dtype:
        return x
    if dtype not in DTYPES:
        raise ValueError(f"cast: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if dev.fuse and x.len and x.dtype in fusion.FUSABLE and dtype in fusion.FUSABLE:
        return fusion.defer_cast(dev, x, dtype)
    out = dev.empty(x.len, dtype)
    if x.len:
        launch_cast(dev, x, out)
    return out


def launch_cast(dev, x, out) -> None:
    """Record the kernel converting x into out (same length, out's dtype; see `cast`): the
    unary template with the conversion as its expression (alpha, beta unused).

    A length that is a multiple of 4 runs the vec4 template (unary_vec4.wgsl) in n // 4
    threads: each loads 4 elements, converts each by the same expression and stores 4, so
    the bits are the scalar kernel's (f32 <-> f16 as vec4<f32> <-> vec4<f16>: 16- and 8-byte
    accesses rather than 4- and 2-byte ones; every other pair the same way). Other lengths
    run one element a thread: WGSL cannot bind one buffer as both array<vec4<T>> and
    array<T> for a scalar tail, and the casts autocast makes (activations, weights) are
    multiples of 4."""
    vec4 = x.len % 4 == 0
    kernel = dev.op_kernels.get(("cast", x.dtype, out.dtype, vec4))
    if kernel is None:  # first use on this device
        src, dst = DTYPES[x.dtype], DTYPES[out.dtype]
        if dst.name == "bool":
            expr = _CAST_EXPR["float_bool" if src.compute == "f32" else "bool"]
        elif src.name == "bool":
            expr = _CAST_EXPR["from_bool"]
        elif {src.name, dst.name} == {"i32", "u32"}:
            expr = _CAST_EXPR["bits"]
        else:
            expr = _CAST_EXPR["convert"]
        expr = expr.format(C=src.compute, OUT_C=dst.compute)
        text = source("unary_vec4.wgsl" if vec4 else "unary.wgsl", expr, UNARY_PARAMS, x.dtype, out.dtype)
        kernel = dev.op_kernels["cast", x.dtype, out.dtype, vec4] = dev.kernel(
            f"cast_{x.dtype}_{out.dtype}" + ("_vec4" if vec4 else ""), text, 1, 1, UNARY_PARAMS.format(x.dtype))
    threads = x.len // 4 if vec4 else x.len
    zero = scalar_param(x.dtype, 0)
    dev.launch(kernel, [x], [out], (threads, zero, zero), grid_1d(dev, threads))


def where(dev, cond, a, b):
    """out[i] = a[i] if cond[i] != 0 else b[i] (equal lengths). cond may be of any dtype
    (bool, or f32 0/1 masks); a and b share one dtype, which the result keeps."""
    check_buffer("where", "cond", cond)
    for name, buf in (("a", a), ("b", b)):
        check_buffer("where", name, buf, cond.len, "len(cond)")
    dtype = check_same_dtype("where", a, b)
    out = dev.empty(cond.len, dtype)
    if cond.len == 0:
        return out
    kernel = dev.kernel("nd_where", source("nd_where.wgsl", "", COUNT_PARAMS, cond.dtype, words(dtype)), 3, 1,
                        COUNT_PARAMS.format())
    dev.launch(kernel, [cond, a, b], [out], (cond.len,), grid_1d(dev, cond.len))
    return out
