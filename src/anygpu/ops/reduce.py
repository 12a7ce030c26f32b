"""Sums (Layer 0): sum_all, sum_inner (over the last axis), sum_rows (over the first).

sum_inner is the adjoint of add_broadcast (b[outer] added along inner) and sum_rows the
adjoint of add_per_col (b[cols] added to every row): the backward of each add sums the
incoming gradient over the axis the bias was broadcast along. Long sums run as a tree
of passes (each pass writes one partial per chunk), never as one thread's loop.
"""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_positive, grid_1d

__all__ = ["sum_all", "sum_inner", "sum_rows"]

_CHUNK = 4096      # elements one workgroup sums per pass (16 per thread)
_SHORT_ROW = 64    # rows up to this length are summed by one thread each
_ROW_CHUNK = 256   # rows one sum_rows workgroup covers per pass


def reduce_inner(dev, term: str, a, b, rows: int, inner: int, scale: float = 1.0):
    """[rows]: scale * the sum over the inner axis of TERM(a, b), a and b [rows, inner].

    TERM is a WGSL expression of `a` and `b` (one element of each), e.g. "a" or
    "(a - b) * (a - b)". Arguments are not checked here: callers check them."""
    while True:
        if inner <= _SHORT_ROW:
            kernel = dev.kernel(f"sum_inner[{term}]", load_shader("reduce.wgsl", TERM=term), 2, 1, "IIIIf",
                                entry_point="per_thread")
            out = dev.empty(rows)
            dev.launch(kernel, [a, b], [out], (rows, inner, inner, 1, scale), grid_1d(dev, rows))
            return out
        n_chunks = -(-inner // _CHUNK)
        kernel = dev.kernel(f"sum_inner[{term}]", load_shader("reduce.wgsl", TERM=term), 2, 1, "IIIIf",
                            entry_point="per_workgroup")
        out = dev.empty(rows * n_chunks)
        last_pass = n_chunks == 1
        dev.launch(kernel, [a, b], [out], (rows, inner, _CHUNK, n_chunks, scale if last_pass else 1.0),
                   dev.grid(rows * n_chunks))
        if last_pass:
            return out
        # The partials [rows, n_chunks] are summed by the next pass.
        a = b = out
        inner = n_chunks
        term = "a"


def sum_inner(dev, a, outer: int, inner: int):
    """Sum over the last axis: a [outer, inner] -> [outer], out[o] = sum_i a[o, i].

    The backward of add_broadcast(x, b, outer, inner) for b."""
    check_positive("sum_inner", outer=outer, inner=inner)
    check_buffer("sum_inner", "a", a, outer * inner, "outer*inner")
    return reduce_inner(dev, "a", a, a, outer, inner)


def sum_rows(dev, a, rows: int, cols: int):
    """Sum over the first axis: a [rows, cols] -> [cols], out[c] = sum_r a[r, c].

    The backward of add_per_col(x, b, rows, cols) for b (a linear layer's bias gradient).
    f32 or f16 a; the sum is f32 throughout, the result a's dtype (f16 rounded once, at the
    last store). Passes of chunks of rows, each writing f32 partial sums [chunks, cols] that
    the next pass sums, until one chunk is left. Where cols % 4 == 0 a thread sums four
    adjacent columns (sum_rows_vec4.wgsl), else one (sum_rows.wgsl)."""
    check_positive("sum_rows", rows=rows, cols=cols)
    check_buffer("sum_rows", "a", a, rows * cols, "rows*cols")
    dtype = a.dtype
    if dtype not in ("f32", "f16"):
        raise ValueError(f"sum_rows: a must be f32 or f16, got {dtype}")
    vec4 = cols % 4 == 0
    col_tiles = -(-cols // (_VEC4_TILE if vec4 else 64))
    while True:
        chunk = _vec4_chunk(rows, col_tiles) if vec4 else _ROW_CHUNK
        n_chunks = -(-rows // chunk)
        out_dtype = dtype if n_chunks == 1 else "f32"
        kernel = _sum_rows_kernel(dev, a.dtype, out_dtype, vec4)
        partial = dev.empty(n_chunks * cols, out_dtype)
        dev.launch(kernel, [a], [partial], (rows, cols, chunk, n_chunks, col_tiles), dev.grid(col_tiles * n_chunks))
        if n_chunks == 1:
            return partial
        a, rows = partial, n_chunks


# How sum_rows_vec4.wgsl reads one unit of four columns: (array element, its f32 value).
# f16 comes as two u32 words (8-byte loads; 16-bit loads were the f16 matmul's cost on an
# H200, docs/NOTES.md), unpacked exactly.
_VEC4_UNITS = {"f32": ("vec4<f32>", "a[i]"),
               "f16": ("vec2<u32>", "vec4<f32>(unpack2x16float(a[i].x), unpack2x16float(a[i].y))")}
_VEC4_TILE = 128          # columns one sum_rows_vec4 workgroup covers (its UNITS = 32 threads x 4)
_VEC4_CHUNKS = (256, 128, 64)   # rows a workgroup may cover per pass (8 row lanes)
_VEC4_WORKGROUPS = 512    # enough to fill an H200 (132 SMs) several workgroups deep


def _vec4_chunk(rows: int, col_tiles: int) -> int:
    """Rows one sum_rows_vec4 workgroup covers: all of them where they fit in one chunk (the
    last pass), else the longest chunk that still gives _VEC4_WORKGROUPS workgroups, else the
    shortest. [16384, 384]: 64 rows (768 workgroups, 8 rows a thread), then one pass of 256."""
    if rows <= _VEC4_CHUNKS[0]:
        return _VEC4_CHUNKS[0]
    for chunk in _VEC4_CHUNKS:
        if col_tiles * -(-rows // chunk) >= _VEC4_WORKGROUPS:
            return chunk
    return _VEC4_CHUNKS[-1]


def _sum_rows_kernel(dev, dtype: str, out_dtype: str, vec4: bool):
    """The pass kernel reading `dtype`, writing `out_dtype` partials: four columns a thread
    (vec4) or one. Memoised per device."""
    key = ("sum_rows", dtype, out_dtype, vec4)
    kernel = dev.op_kernels.get(key)
    if kernel is None:  # first use on this device
        if vec4:
            unit, widen = _VEC4_UNITS[dtype]
            text = load_shader("sum_rows_vec4.wgsl", dtype, out_dtype, UNIT=unit, WIDEN=widen,
                               NARROW=str(out_dtype == "f16").lower())
            name = f"sum_rows_vec4_{dtype}_{out_dtype}"
        else:
            text = load_shader("sum_rows.wgsl", dtype, out_dtype)
            name = "sum_rows" if (dtype, out_dtype) == ("f32", "f32") else f"sum_rows_{dtype}_{out_dtype}"
        kernel = dev.op_kernels[key] = dev.kernel(name, text, 1, 1, "IIIII")
    return kernel


def sum_all(dev, x):
    """The sum of every element of x, as a 1-element Buffer (0 for an empty x)."""
    check_buffer("sum_all", "x", x)
    if x.len == 0:
        return dev.alloc(1)
    return reduce_inner(dev, "a", x, x, 1, x.len)
