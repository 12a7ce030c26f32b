"""Layer 0: integer kernels (i32 Buffers) and row sorting.

Integer tensors are exact: their arithmetic, reductions and matmul run on the i32
instances of the dtype-templated Layer-0 kernels (wrapping at 32 bits) instead of going
through float32, which is only exact below 2**24. Comparisons write bool results as f32 0/1
(the Tensor layer's bool storage)."""

from __future__ import annotations

from ..runtime import load_shader
from . import nd
from ._common import check_buffer, grid_1d
from .matmul import matmul_strided

__all__ = ["broadcast_binary_int", "reduce_axis_int", "matmul_int", "sort_rows", "index_put"]

# The integer ops of the Tensor layer (expressions: ops/elementwise.py INT_BINARY and COMPARISONS).
INT_BINARY = {"add", "sub", "rsub", "mul", "floordiv", "remainder", "pow", "maximum", "minimum",
              "bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge"}
_REDUCE_OPS = {"sum": 0, "max": 1, "min": 2, "argmax": 3, "argmin": 4}


def _check_int(op: str, **buffers) -> None:
    for name, buf in buffers.items():
        check_buffer(op, name, buf)
        if buf.dtype != "i32":
            raise ValueError(f"{op}: {name} must be an i32 buffer, got {buf.dtype}")


# Names the Tensor layer uses -> the Layer-0 integer ops (ops/elementwise.py INT_BINARY, COMPARISONS).
_LAYER0_NAMES = {"floordiv": "floor_divide"}


def broadcast_binary_int(dev, name: str, a, a_shape, b, b_shape):
    """out = INT_BINARY[name](a, b) on i32 Buffers with NumPy broadcasting; returns
    (Buffer, out_shape). The result is i32, or f32 0/1 for comparisons. The templated
    Layer-0 kernel (nd.broadcast_binary on i32) does the work."""
    if name not in INT_BINARY:
        raise ValueError(f"integer {name}: not an integer op (expected one of {sorted(INT_BINARY)})")
    _check_int(name, a=a, b=b)
    if name == "rsub":
        return nd.broadcast_binary(dev, "sub", b, b_shape, a, a_shape)
    return nd.broadcast_binary(dev, _LAYER0_NAMES.get(name, name), a, a_shape, b, b_shape)


def reduce_axis_int(dev, x, outer: int, mid: int, inner: int, op: str = "sum"):
    """Reduce i32 x viewed as [outer, mid, inner] over mid -> i32 [outer, inner]:
    sum, max, min, or the argmax/argmin index (an empty sum is 0)."""
    _check_int("reduce_" + op, x=x)
    check_buffer("reduce_" + op, "x", x, outer * mid * inner, "outer*mid*inner")
    if op not in _REDUCE_OPS:
        raise ValueError(f"reduce_axis_int: op must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    if mid < 1 and op != "sum":
        raise ValueError(f"reduce_{op}: cannot reduce over an empty dimension")
    if outer * inner == 0 or mid == 0:
        return dev.alloc(outer * inner, "i32")
    return nd.reduce_axis(dev, x, outer, mid, inner, op)


def matmul_int(dev, a, b, batch: int, m: int, n: int, k: int):
    """Exact integer C[z] = A[z] @ B[z] for contiguous i32 A [batch, m, k], B [batch, k, n]
    (the simple matmul kernel on i32, wrapping at 32 bits)."""
    _check_int("matmul", a=a, b=b)
    check_buffer("matmul", "a", a, batch * m * k, "batch*m*k")
    check_buffer("matmul", "b", b, batch * k * n, "batch*k*n")
    if batch * m * n == 0 or k == 0:
        return dev.alloc(batch * m * n, "i32")
    return matmul_strided(dev, a, b, batch, m, n, k)


def sort_rows(dev, x, rows: int, n: int, descending: bool = False):
    """The i32 permutation that sorts each row of x [rows, n] (f32 or i32; stable; NaN
    largest, as torch.sort)."""
    check_buffer("sort", "x", x, rows * n, "rows*n")
    if x.dtype not in ("f32", "i32"):
        raise ValueError(f"sort: x must be an f32 or i32 buffer, got {x.dtype}")
    out = dev.empty(rows * n, "i32")
    if rows * n == 0:
        return out
    if x.dtype == "f32":
        subs = dict(TYPE="f32", NAN_TEST="(bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u")
    else:
        subs = dict(TYPE="i32", NAN_TEST="false")
    kernel = dev.kernel("sort_rank_" + x.dtype, load_shader("sort_rank.wgsl", **subs), 1, 1, "IIII")
    dev.launch(kernel, [x], [out], (rows, n, int(descending), 0), grid_1d(dev, rows * n))
    return out


def index_put(dev, dst, positions, src):
    """dst[positions[i]] = src[i] in place (flat positions, i32; src and dst share a dtype)."""
    _check_int("index_put", positions=positions)
    check_buffer("index_put", "src", src, positions.len, "len(positions)")
    check_buffer("index_put", "dst", dst)
    if src.dtype != dst.dtype:
        raise ValueError(f"index_put: src is {src.dtype} but dst is {dst.dtype}")
    if positions.len:
        kernel = dev.kernel("index_put", load_shader("index_put.wgsl"), 2, 1, "II")
        dev.launch(kernel, [src, positions], [dst], (positions.len, dst.len), grid_1d(dev, positions.len))
    return dst
