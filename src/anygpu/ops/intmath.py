"""Layer 0: integer kernels (i32 Buffers) and row sorting.

Integer tensors are exact: their arithmetic, reductions and matmul run on the i32
instances of the dtype-templated Layer-0 kernels instead of going through float32, which is
only exact below 2**24. Comparisons write bool results as f32 0/1 (the Tensor layer's bool
storage).

int64 is kept in 32 bits, and torch's int64 would not wrap where i32 does, so the kernels of
int64 results that can pass 32 bits (`check=` of broadcast_binary_int and matmul_int,
scan_int, cast_to_int) compute exactly and report a result beyond [-2**31, 2**31 - 1] in
the device's overflow words (kernels/lib/int_overflow.wgsl) instead of wrapping silently;
`raise_if_overflowed`, called before every host read of a tensor, turns a report into a
ValueError naming the op and the values. Unchecked (int32) kernels wrap, as torch's int32."""

from __future__ import annotations

import functools
import math
import struct
import weakref

import numpy as np

from ..runtime import Params, load_shader
from . import determinism, nd, radix
from ._common import check_buffer, grid_1d
from .matmul import matmul_strided

__all__ = ["broadcast_binary_int", "reduce_axis_int", "matmul_int", "scan_int", "cast_to_int", "sort_rows",
           "index_put"]

# The integer ops of the Tensor layer (expressions: ops/elementwise.py INT_BINARY and COMPARISONS).
INT_BINARY = {"add", "sub", "rsub", "mul", "floordiv", "remainder", "pow", "maximum", "minimum",
              "bitwise_and", "bitwise_or", "bitwise_xor", "eq", "ne", "lt", "le", "gt", "ge"}
_REDUCE_OPS = {"sum": 0, "max": 1, "min": 2, "argmax": 3, "argmin": 4}
# The binary ops whose result can pass 32 bits -> their OP in kernels/int64_binary.wgsl.
CHECKED_BINARY = {"add": 0, "sub": 1, "mul": 2, "floordiv": 3, "pow": 4}
_SCAN_OPS = {"cumsum": 0, "cumprod": 1, "prod": 2}
# What a report names: bit i of overflow word 0 is OVERFLOW_OPS[i] (the Tensor layer's op).
OVERFLOW_OPS = ("add", "sub", "mul", "floordiv", "pow", "neg", "abs", "square", "matmul", "cumsum", "cumprod",
                "prod", "to")
_CODES = {name: code for code, name in enumerate(OVERFLOW_OPS)}
INT64_BITS = "the 32 bits anygpu keeps int64 in ([-2**31, 2**31 - 1])"

BINARY_PARAMS = Params("n: u32", "ndim: u32", "op: u32", "code: u32",
                       "shape: u32[8]", "a_strides: u32[8]", "b_strides: u32[8]")


def _check_int(op: str, **buffers) -> None:
    for name, buf in buffers.items():
        check_buffer(op, name, buf)
        if buf.dtype != "i32":
            raise ValueError(f"{op}: {name} must be an i32 buffer, got {buf.dtype}")


# Names the Tensor layer uses -> the Layer-0 integer ops (ops/elementwise.py INT_BINARY, COMPARISONS).
_LAYER0_NAMES = {"floordiv": "floor_divide"}


class _Overflow:
    """A device's overflow words and whether a checked kernel was recorded since their last read
    (`always`: one was recorded inside a captured step, whose replays run it unseen)."""

    __slots__ = ("words", "dirty", "always")

    def __init__(self, words):
        self.words, self.dirty, self.always = words, False, False


_OVERFLOW: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _overflow_words(dev):
    """The device's overflow words (4 x i32, zero while nothing overflowed), marked to be read."""
    state = _OVERFLOW.get(dev)
    if state is None:
        state = _OVERFLOW[dev] = _Overflow(dev.alloc(4, "i32"))
    state.dirty = True
    if dev._recording is not None:
        state.always = True
    return state.words


def raise_if_overflowed(dev) -> None:
    """ValueError when a checked integer kernel of dev met a result beyond 32 bits since the
    last call (then the words are cleared: the device stays usable). Tensor.numpy calls it
    before every read, so no int64 value that wrapped reaches the host, whichever tensor it
    fed; it costs nothing while no checked kernel ran, else one 16-byte read."""
    state = _OVERFLOW.get(dev)
    if state is None or not (state.dirty or state.always):
        return
    state.dirty = False
    words = dev.read(state.words)
    if words[0]:
        dev.write(state.words, np.zeros(4, np.int32))
        raise ValueError(_overflow_message(*(int(w) for w in words)))


def _overflow_message(mask: int, first: int, x: int, y: int) -> str:
    names = [name for code, name in enumerate(OVERFLOW_OPS) if mask >> code & 1]
    op = OVERFLOW_OPS[first - 1] if 0 < first <= len(OVERFLOW_OPS) else names[0]
    others = [name for name in names if name != op]
    also = f"; also beyond 32 bits since the last read: {', '.join(others)}" if others else ""
    return (f"{op}: {_overflow_example(op, x, y)}: its GPU kernel reported this instead of wrapping, found "
            f"at this host read (the first since the op ran){also}. Compute in floating point "
            f"(x.float() / x.double()) or keep the integers smaller")


def _overflow_example(op: str, x: int, y: int) -> str:
    """What a report describes (its two words x, y: see kernels/lib/int_overflow.wgsl)."""
    beyond = f"is beyond {INT64_BITS}"
    if op in ("add", "sub", "mul", "floordiv", "square"):
        sign = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "square": "*"}[op]
        exact = {"add": x + y, "sub": x - y, "mul": x * y, "floordiv": x // y if y else 0, "square": x * y}[op]
        return f"{x} {sign} {y} = {exact} {beyond}"
    if op == "pow":
        return f"{x} ** {y}" + (f" = {x ** y}" if y < 128 else "") + f" {beyond}"
    if op == "neg":
        return f"-({y}) = {-y} {beyond}"
    if op == "abs":
        return f"abs({y}) = {abs(y)} {beyond}"
    if op == "matmul":
        return f"the element at row {x}, column {y} of an integer matrix product {beyond}"
    if op == "to":
        value = struct.unpack("<f", struct.pack("<i", x))[0]
        if not math.isfinite(value):
            return f"the float {value} at element {y} has no int64 value"
        return f"the float {value:.9g} at element {y} {beyond} as an integer"
    if op == "prod":
        return f"the product of row {x} (the tensor as [rows, n] along the dim) {beyond}"
    kind = "sum" if op == "cumsum" else "product"
    return f"the running {kind} at step {y} of row {x} (the tensor as [rows, n] along the dim) {beyond}"


@functools.lru_cache(maxsize=None)
def _source(name: str, dtype: str | None = None, **subs) -> str:
    return load_shader(name, dtype, **subs)


def broadcast_binary_int(dev, name: str, a, a_shape, b, b_shape, check: str = ""):
    """out = INT_BINARY[name](a, b) on i32 Buffers with NumPy broadcasting; returns
    (Buffer, out_shape). The result is i32, or f32 0/1 for comparisons. The templated
    Layer-0 kernel (nd.broadcast_binary on i32) does the work, wrapping at 32 bits; with
    `check` (the op a report names, one of OVERFLOW_OPS) a CHECKED_BINARY op runs on
    kernels/int64_binary.wgsl instead, which reports results beyond 32 bits."""
    if name not in INT_BINARY:
        raise ValueError(f"integer {name}: not an integer op (expected one of {sorted(INT_BINARY)})")
    _check_int(name, a=a, b=b)
    if check:
        return _binary_checked(dev, name, a, tuple(a_shape), b, tuple(b_shape), check)
    if name == "rsub":
        return nd.broadcast_binary(dev, "sub", b, b_shape, a, a_shape)
    return nd.broadcast_binary(dev, _LAYER0_NAMES.get(name, name), a, a_shape, b, b_shape)


def _code(op: str, check: str) -> int:
    if check not in _CODES:
        raise ValueError(f"{op}: check must name one of {list(OVERFLOW_OPS)}, got {check!r}")
    return _CODES[check]


def _binary_checked(dev, name, a, a_shape, b, b_shape, check):
    if name not in CHECKED_BINARY:
        raise ValueError(f"integer {name}: cannot pass 32 bits, so it has no checked form "
                         f"(checked: {sorted(CHECKED_BINARY)})")
    code = _code(name, check)
    out_shape = nd.broadcast_shapes(name, a_shape, b_shape)
    check_buffer(name, "a", a, nd.numel(a_shape))
    check_buffer(name, "b", b, nd.numel(b_shape))
    n = nd.numel(out_shape)
    out = dev.empty(n, "i32")
    if n:
        kernel = dev.kernel("int64_binary", _source("int64_binary.wgsl", **BINARY_PARAMS.subs()), 2, 2,
                            BINARY_PARAMS.format())
        params = ([n, len(out_shape), CHECKED_BINARY[name], code] + nd._packed(out_shape, 1)
                  + nd._packed(nd._broadcast_strides(a_shape, out_shape), 0)
                  + nd._packed(nd._broadcast_strides(b_shape, out_shape), 0))
        dev.launch(kernel, [a, b], [out, _overflow_words(dev)], params, grid_1d(dev, n))
    return out, out_shape


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


def matmul_int(dev, a, b, batch: int, m: int, n: int, k: int, check: bool = False):
    """Exact integer C[z] = A[z] @ B[z] for contiguous i32 A [batch, m, k], B [batch, k, n]:
    the simple matmul kernel on i32, wrapping at 32 bits, or with `check` (int64 results)
    kernels/int64_matmul.wgsl, which sums in 96 bits and reports a C element beyond 32 bits."""
    _check_int("matmul", a=a, b=b)
    check_buffer("matmul", "a", a, batch * m * k, "batch*m*k")
    check_buffer("matmul", "b", b, batch * k * n, "batch*k*n")
    if batch * m * n == 0 or k == 0:
        return dev.alloc(batch * m * n, "i32")
    if not check:
        return matmul_strided(dev, a, b, batch, m, n, k)
    out = dev.empty(batch * m * n, "i32")
    kernel = dev.kernel("int64_matmul", _source("int64_matmul.wgsl"), 2, 2, "8I")
    dev.launch(kernel, [a, b], [out, _overflow_words(dev)], (batch * m * n, m, n, k, _CODES["matmul"], 0, 0, 0),
               grid_1d(dev, batch * m * n))
    return out


def scan_int(dev, x, outer: int, mid: int, inner: int, op: str):
    """Along the middle axis of i32 x viewed as [outer, mid, inner] (int64 values), exactly:
    op "cumsum" / "cumprod" -> the running sums / products [outer, mid, inner], "prod" -> the
    products [outer, inner] (1 over an empty axis). A value beyond 32 bits is reported
    (kernels/int64_scan.wgsl; a product with a zero factor is 0 whatever its partial products)."""
    _check_int(op, x=x)
    check_buffer(op, "x", x, outer * mid * inner, "outer*mid*inner")
    if op not in _SCAN_OPS:
        raise ValueError(f"scan_int: op must be one of {sorted(_SCAN_OPS)}, got {op!r}")
    n = outer * inner
    if op == "prod" and mid == 0:
        return dev.upload(np.ones(n, np.int32))
    out = dev.empty(n if op == "prod" else n * mid, "i32")
    if n and mid:
        kernel = dev.kernel("int64_scan", _source("int64_scan.wgsl"), 1, 2, "8I")
        dev.launch(kernel, [x], [out, _overflow_words(dev)], (n, mid, inner, _SCAN_OPS[op], _CODES[op], 0, 0, 0),
                   grid_1d(dev, n))
    return out


def cast_to_int(dev, x):
    """x (f32 or f16) as i32 holding int64 values: truncated toward zero, as torch; a value
    beyond 32 bits, inf or NaN is reported (kernels/int64_cast.wgsl) and stored as 0."""
    check_buffer("to", "x", x)
    if x.dtype not in ("f32", "f16"):
        raise ValueError(f"cast_to_int: x must be an f32 or f16 buffer, got {x.dtype}")
    out = dev.empty(x.len, "i32")
    if x.len:
        kernel = dev.kernel("int64_cast", _source("int64_cast.wgsl", x.dtype), 1, 2, "II")
        dev.launch(kernel, [x], [out, _overflow_words(dev)], (x.len, _CODES["to"]), grid_1d(dev, x.len))
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
    """dst[positions[i]] = src[i] in place (flat positions, i32; src and dst share a dtype;
    positions outside dst write nothing). A position given more than once keeps one of its
    values, which one unspecified (torch's index_put without accumulate); under
    use_deterministic_algorithms(True) the last one, as a sequential loop leaves it: the
    positions are sorted stably (ops/radix.py) and each run's last entry writes."""
    _check_int("index_put", positions=positions)
    check_buffer("index_put", "src", src, positions.len, "len(positions)")
    check_buffer("index_put", "dst", dst)
    if src.dtype != dst.dtype:
        raise ValueError(f"index_put: src is {src.dtype} but dst is {dst.dtype}")
    n = positions.len
    if not n:
        return dst
    if determinism.are_deterministic_algorithms_enabled():
        keys, order = dev.empty(n, "u32"), dev.empty(n, "i32")
        make_keys = dev.kernel("index_put_keys", load_shader("index_put_keys.wgsl"), 1, 2, "II")
        dev.launch(make_keys, [positions], [keys, order], (n, dst.len), grid_1d(dev, n))
        keys, order = radix.sort_pairs(dev, keys, order, n, key_bits=int(dst.len).bit_length())
        write = dev.kernel("index_put_last", load_shader("index_put_last.wgsl"), 3, 1, "II")
        dev.launch(write, [src, keys, order], [dst], (n, dst.len), grid_1d(dev, n))
        return dst
    kernel = dev.kernel("index_put", load_shader("index_put.wgsl"), 2, 1, "II")
    dev.launch(kernel, [src, positions], [dst], (n, dst.len), grid_1d(dev, n))
    return dst
