"""Layer 0: integer kernels (i32 Buffers) and row sorting.

Integer tensors are exact: their arithmetic, reductions and matmul run on i32 kernels
(wrapping at 32 bits) instead of going through float32, which is only exact below 2**24.
Comparisons write bool results as f32 0/1 (the Tensor layer's bool storage)."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, grid_1d
from .nd import _broadcast_strides, _packed, broadcast_shapes, numel

__all__ = ["broadcast_binary_int", "reduce_axis_int", "matmul_int", "sort_rows", "index_put"]

_TRUE_FALSE = "as_bool({})"
INT_BINARY = {
    "add": "bitcast<u32>(a + b)",
    "sub": "bitcast<u32>(a - b)",
    "rsub": "bitcast<u32>(b - a)",
    "mul": "bitcast<u32>(a * b)",
    "floordiv": "bitcast<u32>(floor_div(a, b))",
    "remainder": "bitcast<u32>(floor_mod(a, b))",
    "pow": "bitcast<u32>(int_pow(a, b))",
    "maximum": "bitcast<u32>(max(a, b))",
    "minimum": "bitcast<u32>(min(a, b))",
    "bitwise_and": "bitcast<u32>(a & b)",
    "bitwise_or": "bitcast<u32>(a | b)",
    "bitwise_xor": "bitcast<u32>(a ^ b)",
    "eq": _TRUE_FALSE.format("a == b"),
    "ne": _TRUE_FALSE.format("a != b"),
    "lt": _TRUE_FALSE.format("a < b"),
    "le": _TRUE_FALSE.format("a <= b"),
    "gt": _TRUE_FALSE.format("a > b"),
    "ge": _TRUE_FALSE.format("a >= b"),
}
_COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}
_REDUCE_OPS = {"sum": 0, "max": 1, "min": 2, "argmax": 3, "argmin": 4}


def _check_int(op: str, **buffers) -> None:
    for name, buf in buffers.items():
        check_buffer(op, name, buf)
        if buf.dtype != "i32":
            raise ValueError(f"{op}: {name} must be an i32 buffer, got {buf.dtype}")


def broadcast_binary_int(dev, name: str, a, a_shape, b, b_shape):
    """out = INT_BINARY[name](a, b) on i32 Buffers with NumPy broadcasting; returns
    (Buffer, out_shape). The result is i32, or f32 0/1 for comparisons."""
    if name not in INT_BINARY:
        raise ValueError(f"integer {name}: not an integer op (expected one of {sorted(INT_BINARY)})")
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    _check_int(name, a=a, b=b)
    check_buffer(name, "a", a, numel(a_shape))
    check_buffer(name, "b", b, numel(b_shape))
    out_shape = broadcast_shapes(name, a_shape, b_shape)
    n = numel(out_shape)
    out = dev.empty(n, "f32" if name in _COMPARISONS else "i32")
    if n == 0:
        return out, out_shape
    kernel = dev.kernel("int_" + name, load_shader("nd_int_binary.wgsl", EXPR=INT_BINARY[name]), 2, 1,
                        "IIII" + "I" * 24)
    params = ([n, len(out_shape), 0, 0] + _packed(out_shape, 1)
              + _packed(_broadcast_strides(a_shape, out_shape), 0)
              + _packed(_broadcast_strides(b_shape, out_shape), 0))
    dev.launch(kernel, [a, b], [out], params, grid_1d(dev, n))
    return out, out_shape


def reduce_axis_int(dev, x, outer: int, mid: int, inner: int, op: str = "sum"):
    """Reduce i32 x viewed as [outer, mid, inner] over mid -> i32 [outer, inner]:
    sum, max, min, or the argmax/argmin index."""
    _check_int("reduce_" + op, x=x)
    check_buffer("reduce_" + op, "x", x, outer * mid * inner, "outer*mid*inner")
    if op not in _REDUCE_OPS:
        raise ValueError(f"reduce_axis_int: op must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    if mid < 1 and op != "sum":
        raise ValueError(f"reduce_{op}: cannot reduce over an empty dimension")
    out = dev.alloc(outer * inner, "i32")
    if outer * inner == 0 or mid == 0:
        return out
    kernel = dev.kernel("int_reduce", load_shader("nd_int_reduce.wgsl"), 1, 1, "IIII")
    dev.launch(kernel, [x], [out], (outer, mid, inner, _REDUCE_OPS[op]), grid_1d(dev, outer * inner))
    return out


def matmul_int(dev, a, b, batch: int, m: int, n: int, k: int):
    """Exact integer C[z] = A[z] @ B[z] for contiguous i32 A [batch, m, k], B [batch, k, n]."""
    _check_int("matmul", a=a, b=b)
    check_buffer("matmul", "a", a, batch * m * k, "batch*m*k")
    check_buffer("matmul", "b", b, batch * k * n, "batch*k*n")
    total = batch * m * n
    out = dev.alloc(total, "i32")
    if total == 0:
        return out
    kernel = dev.kernel("matmul_int", load_shader("matmul_int.wgsl"), 2, 1, "IIII")
    dev.launch(kernel, [a, b], [out], (m, n, k, total), grid_1d(dev, total))
    return out


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
