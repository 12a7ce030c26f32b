"""float64 counterparts of the arithmetic ops: elementwise (every unary and binary name of
ops/elementwise.py), broadcasting binary ops and reductions (ops/nd.py), sums (reduce.py),
bias additions (broadcast.py), matrix products (matmul.py), softmax, gather/scatter-add
(index.py), sorting and index_put (intmath.py) and dropout (random.py).

Each computes in float64 as torch's CPU kernels do: the same formulas where torch has
one (sigmoid 1 / (1 + exp(-x)), pow's exact cases for scalar exponents 2, 3, -1, -2, 0.5,
-0.5, softplus through log1p, sign(NaN) = 0), NaN rules as the GPU ops (which follow
torch): max/min/argmax/argmin take NaN as the extreme (the first NaN's index), comparisons
are false for NaN (ne true), sort puts NaN last ascending. Where torch's formula cancels,
an equal one that does not: gelu as x erfc(-x / sqrt 2) / 2, gelu_tanh as x sigmoid(2u)
(torch's 1 + erf, 1 + tanh lose every digit below about -5); both agree with torch to
1e-12 where torch's own result is accurate (tests/ops/test_host64_math.py). Transcendentals are numpy's
(libm), erf and erfc Python's `math` ones applied per element (numpy has no erf, scipy is
not a dependency): gelu and erf run at about 5 M elements a second (measured on the 2-core
dev machine, 0.2 s per million; numpy's exp takes 3 ms).
"""

from __future__ import annotations

import math

import numpy as np

from ...runtime.dtypes import DTYPES
from ...runtime.host import HostBuffer
from .._common import check_buffer, check_positive, check_same_len
from ..elementwise import COMPARISONS, out_dtype_of
from ..nd import broadcast_shapes, numel
from . import f64, host_op, values

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)   # gelu_tanh's constant (torch: M_SQRT2 * M_2_SQRTPI * 0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)  # the normal density's factor
_KAPPA = 0.044715
_erf_each = np.frompyfunc(math.erf, 1, 1)
_erfc_each = np.frompyfunc(math.erfc, 1, 1)


def _erf(v: np.ndarray) -> np.ndarray:
    return np.asarray(_erf_each(v), dtype=np.float64)


def _normal_cdf(v: np.ndarray) -> np.ndarray:
    """Phi(v) = (1 + erf(v / sqrt 2)) / 2, as erfc(-v / sqrt 2) / 2: no cancellation for v << 0,
    where 1 + erf loses every digit (torch computes 1 + erf; the two agree to an ulp of 1)."""
    return 0.5 * np.asarray(_erfc_each(-v * _SQRT_HALF), dtype=np.float64)


def _pow_scalar(v: np.ndarray, exponent: float) -> np.ndarray:
    """v ** exponent as torch's pow(Tensor, Scalar): products, reciprocals and roots for the
    exponents it special-cases (so (-inf) ** 0.5 is sqrt's NaN, 0 ** -0.5 is inf), C's pow
    otherwise (real results for negative bases and integer exponents)."""
    if exponent == 2.0:
        return v * v
    if exponent == 3.0:
        return v * v * v
    if exponent == -1.0:
        return 1.0 / v
    if exponent == -2.0:
        return 1.0 / (v * v)
    if exponent == 0.5:
        return np.sqrt(v)
    if exponent == -0.5:
        return 1.0 / np.sqrt(v)
    return np.power(v, exponent)


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _elu(v, alpha):
    return np.where(v > 0, v, alpha * np.expm1(np.where(v > 0, 0.0, v)))  # NaN and -0 kept


def _gelu_tanh_inner(v):
    return _SQRT_2_OVER_PI * (v + _KAPPA * (v * v * v))


# elementwise.UNARY's ops on float64 `v` with parameters alpha, beta.
UNARY = {
    "scale": lambda v, a, b: v * a,
    "add_scalar": lambda v, a, b: v + a,
    "relu": lambda v, a, b: np.where((v >= 0) | np.isnan(v), v, 0.0),  # relu(-0) = -0, NaN kept
    "sigmoid": lambda v, a, b: _sigmoid(v),
    "silu": lambda v, a, b: v / (1.0 + np.exp(-v)),
    "tanh": lambda v, a, b: np.tanh(v),
    "neg": lambda v, a, b: -v,
    "exp": lambda v, a, b: np.exp(v),
    "log": lambda v, a, b: np.log(v),
    "sqrt": lambda v, a, b: np.sqrt(v),
    "abs": lambda v, a, b: np.abs(v),
    "square": lambda v, a, b: v * v,
    "reciprocal": lambda v, a, b: 1.0 / v,
    "clamp": lambda v, a, b: np.minimum(np.maximum(v, a), b),  # NaN kept; alpha > beta gives beta
    "gelu": lambda v, a, b: v * _normal_cdf(v),
    # 0.5 v (1 + tanh(u)) written v sigmoid(2u): no cancellation where tanh(u) is near -1
    "gelu_tanh": lambda v, a, b: v * _sigmoid(2.0 * _gelu_tanh_inner(v)),
    "sign": lambda v, a, b: (v > 0).astype(np.float64) - (v < 0),  # torch: sign(NaN) = 0, sign(-0) = 0
    "signbit": lambda v, a, b: np.signbit(v).astype(np.float64),
    "frexp_mantissa": lambda v, a, b: np.frexp(v)[0],  # 0, inf, NaN themselves (exponent 0), as torch
    "frexp_exponent": lambda v, a, b: np.frexp(v)[1].astype(np.float64),
    "floor": lambda v, a, b: np.floor(v),
    "ceil": lambda v, a, b: np.ceil(v),
    "round": lambda v, a, b: np.rint(v),  # halves to even, as torch.round
    "trunc": lambda v, a, b: np.trunc(v),
    "inside": lambda v, a, b: ((v >= a) & (v <= b)).astype(np.float64),
    "fill": lambda v, a, b: np.full(v.shape, float(a)),
    "div_scalar": lambda v, a, b: v / a,
    "rsub_scalar": lambda v, a, b: a - v,
    "rdiv_scalar": lambda v, a, b: a / v,
    "pow_scalar": lambda v, a, b: _pow_scalar(v, float(a)),
    "log1p": lambda v, a, b: np.log1p(v),
    "sin": lambda v, a, b: np.sin(v),
    "cos": lambda v, a, b: np.cos(v),
    "atan": lambda v, a, b: np.arctan(v),
    "asin": lambda v, a, b: np.arcsin(v),
    "acos": lambda v, a, b: np.arccos(v),
    "erf": lambda v, a, b: _erf(v),
    "leaky_relu": lambda v, a, b: np.where(v > 0, v, v * a),
    "elu": lambda v, a, b: _elu(v, a),
    # softplus with beta = alpha and threshold = beta: v itself above the threshold, as torch
    "softplus": lambda v, a, b: np.where(v * a > b, v, np.log1p(np.exp(v * a)) / a),
    "softplus_grad": lambda v, a, b: np.where(v * a > b, 1.0, _sigmoid(v * a)),
}


def _gelu_backward(grad, x, alpha):
    return grad * (_normal_cdf(x) + x * (_INV_SQRT_2PI * np.exp(-0.5 * x * x)))


def _gelu_tanh_backward(grad, x, alpha):
    """d/dx of x s, s = sigmoid(2u) = (1 + tanh u) / 2: s + 2 x s (1 - s) u', with 1 - s as
    sigmoid(-2u). torch's 0.5 (1 + t) + 0.5 x (1 - t^2) u' (t = tanh u) agrees to ulps of the
    gradient's scale but loses every digit for x below about -5, where 1 + t and 1 - t^2 cancel."""
    u = _gelu_tanh_inner(x)
    du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _KAPPA * (x * x))
    s = _sigmoid(2.0 * u)
    return grad * (s + 2.0 * x * s * _sigmoid(-2.0 * u) * du)


def _share(wins):
    """maximum_share / minimum_share: a's share of the gradient (see elementwise.BINARY)."""
    def share(a, b, alpha):
        either_nan = np.isnan(a) | np.isnan(b)
        return np.where(either_nan | wins(a, b), 1.0, np.where(a == b, 0.5, 0.0))
    return share


# elementwise.BINARY's ops on float64 `a`, `b` with parameter alpha.
BINARY = {
    "add": lambda a, b, alpha: a + b,
    "sub": lambda a, b, alpha: a - b,
    "mul": lambda a, b, alpha: a * b,
    "div": lambda a, b, alpha: a / b,
    "pow": lambda a, b, alpha: np.power(a, b),
    "maximum": lambda a, b, alpha: np.maximum(a, b),  # NaN on either side gives NaN
    "minimum": lambda a, b, alpha: np.minimum(a, b),
    "mask_mul": lambda a, b, alpha: np.where(b != 0, a * b, 0.0),  # 0 where b is 0, even for inf/NaN a
    "relu_backward": lambda a, b, alpha: np.where((b > 0) | np.isnan(b), a, 0.0),
    "sigmoid_backward": lambda a, b, alpha: a * b * (1.0 - b),
    "silu_backward": lambda a, b, alpha: a * _sigmoid(b) * (1.0 + b * (1.0 - _sigmoid(b))),
    "tanh_backward": lambda a, b, alpha: a * (1.0 - b * b),
    "gelu_backward": _gelu_backward,
    "gelu_tanh_backward": _gelu_tanh_backward,
    "leaky_relu_backward": lambda a, b, alpha: np.where(b > 0, a, a * alpha),
    "elu_backward": lambda a, b, alpha: np.where(b > 0, a, a * alpha * np.exp(np.minimum(b, 0.0))),
    "maximum_share": _share(np.greater),
    "minimum_share": _share(np.less),
    "same": lambda a, b, alpha: ((a == b) | (np.isnan(a) & np.isnan(b))).astype(np.float64),
}

# elementwise.COMPARISONS on float64: NaN compares unequal to everything (numpy's rules).
_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
            "gt": np.greater, "ge": np.greater_equal}
assert set(_COMPARE) == set(COMPARISONS)


def _host(op: str, name: str, buf, expected: int | None = None, formula: str = "") -> np.ndarray:
    """buf's float64 elements: a HostBuffer's own, or a GPU Buffer's values read and widened
    (backward rules mix Buffers they allocate, f32 by default, with float64 gradients: torch
    would promote such a pair to float64 too)."""
    check_buffer(op, name, buf, expected, formula)
    if buf.__class__ is not HostBuffer:
        return buf._dev.read(buf).astype(np.float64)
    return buf.arr


def _indices(dev, op: str, name: str, buf, expected: int | None = None, formula: str = "") -> np.ndarray:
    """An i32 index Buffer's values as int64, or ValueError naming the op."""
    check_buffer(op, name, buf, expected, formula)
    if buf.dtype != "i32":
        raise ValueError(f"{op}: {name} must be an int32 buffer, got {buf.dtype}")
    return values(dev, buf).astype(np.int64)


def _result(dev, arr: np.ndarray, dtype: str):
    """arr as a Buffer of `dtype`: a HostBuffer for f64, a GPU Buffer otherwise."""
    if dtype == "f64":
        return f64(dev, arr)
    if arr.size == 0:
        return dev.empty(0, dtype)
    return dev.upload(np.ascontiguousarray(arr, dtype=DTYPES[dtype].host).reshape(-1), dtype)


def _unknown(op: str, name: str, known) -> ValueError:
    return ValueError(f"{op}: {name!r} is not defined for f64 elements (for f64: {', '.join(known)})")


def _apply_binary(op: str, name: str, a: np.ndarray, b: np.ndarray, alpha: float) -> np.ndarray:
    """BINARY[name] or the comparison `name` of float64 arrays (a bool array for comparisons)."""
    with np.errstate(all="ignore"):
        if name in _COMPARE:
            return _COMPARE[name](a, b)
        fn = BINARY.get(name)
        if fn is None:
            raise _unknown(op, name, sorted(BINARY) + sorted(COMPARISONS))
        return fn(a, b, float(alpha))


# --- elementwise.py ---------------------------------------------------------------------

@host_op("unary")
def unary(dev, name: str, x, alpha: float = 0.0, beta: float = 0.0, out=None):
    """out[i] = UNARY[name](x[i]) in float64 (`out`, a float64 Buffer of x's length, is written
    in place when given)."""
    v = _host(name, "x", x)
    fn = UNARY.get(name)
    if fn is None:
        raise _unknown(name, name, sorted(UNARY))
    with np.errstate(all="ignore"):
        result = fn(v, float(alpha), float(beta))
    if out is None:
        return f64(dev, result)
    _host(name, "out", out, x.len, "len(x)")
    out.arr[...] = result
    return out


@host_op("binary")
def binary(dev, name: str, a, b, alpha: float = 0.0, out_dtype: str | None = None):
    """out[i] = BINARY[name](a[i], b[i]) in float64; comparisons give `out_dtype` (default f32 0/1)."""
    check_same_len(name, a, b)
    x, y = _host(name, "a", a), _host(name, "b", b)
    result = out_dtype_of(name, "f64", out_dtype)
    return _result(dev, _apply_binary(name, name, x, y, alpha), result)


@host_op("add")
def add(dev, a, b):
    return binary(dev, "add", a, b)


@host_op("sub")
def sub(dev, a, b):
    return binary(dev, "sub", a, b)


@host_op("mul")
def mul(dev, a, b):
    return binary(dev, "mul", a, b)


@host_op("scale")
def scale(dev, a, s: float):
    return unary(dev, "scale", a, float(s))


@host_op("relu")
def relu(dev, a):
    return unary(dev, "relu", a)


@host_op("sigmoid")
def sigmoid(dev, a):
    return unary(dev, "sigmoid", a)


@host_op("swish")
def swish(dev, a):
    return unary(dev, "silu", a)


@host_op("tanh_act")
def tanh_act(dev, a):
    return unary(dev, "tanh", a)


@host_op("relu_backward")
def relu_backward(dev, grad, x):
    return binary(dev, "relu_backward", grad, x)


@host_op("sigmoid_backward")
def sigmoid_backward(dev, grad, y):
    return binary(dev, "sigmoid_backward", grad, y)


@host_op("swish_backward")
def swish_backward(dev, grad, x):
    check_same_len("swish_backward", grad, x)
    return binary(dev, "silu_backward", grad, x)


@host_op("tanh_backward")
def tanh_backward(dev, grad, y):
    return binary(dev, "tanh_backward", grad, y)


# --- nd.py ------------------------------------------------------------------------------

@host_op("broadcast_binary")
def broadcast_binary(dev, name: str, a, a_shape, b, b_shape, alpha: float = 0.0, out_dtype: str | None = None):
    """f(a, b) with NumPy broadcasting; returns (Buffer, out_shape) as nd.broadcast_binary."""
    a_shape, b_shape = tuple(a_shape), tuple(b_shape)
    out_shape = broadcast_shapes(name, a_shape, b_shape)
    x = _host(name, "a", a, numel(a_shape))
    y = _host(name, "b", b, numel(b_shape))
    result = out_dtype_of(name, "f64", out_dtype)
    out = _apply_binary(name, name, x.reshape(a_shape), y.reshape(b_shape), alpha)
    return _result(dev, np.broadcast_to(out, out_shape), result), out_shape


_REDUCE_OPS = ("sum", "max", "min", "argmax", "argmin")


@host_op("reduce_axis")
def reduce_axis(dev, x, outer: int, mid: int, inner: int, op: str = "sum"):
    """Reduce x [outer, mid, inner] over mid: sum, max, min (float64; NaN wins max and min) or
    argmax, argmin (i32; the first NaN's index where there is one, else the first extreme)."""
    v = _host("reduce_" + op, "x", x, outer * mid * inner, "outer*mid*inner")
    if op not in _REDUCE_OPS:
        raise ValueError(f"reduce: op must be one of {sorted(_REDUCE_OPS)}, got {op!r}")
    if mid < 1:
        raise ValueError(f"reduce_{op}: cannot reduce over an empty dimension")
    v = v.reshape(outer, mid, inner)
    if op == "sum":
        return f64(dev, v.sum(axis=1))
    if op in ("max", "min"):
        return f64(dev, v.max(axis=1) if op == "max" else v.min(axis=1))
    if v.size == 0:
        return dev.empty(0, "i32")
    index = (np.argmax if op == "argmax" else np.argmin)(v, axis=1)  # numpy: the first NaN, the first tie
    return _result(dev, index, "i32")


# --- reduce.py --------------------------------------------------------------------------

@host_op("sum_all")
def sum_all(dev, x):
    """The sum of every element (0 for an empty x), as a 1-element float64 Buffer."""
    return f64(dev, [_host("sum_all", "x", x).sum()])


@host_op("sum_inner")
def sum_inner(dev, a, outer: int, inner: int):
    check_positive("sum_inner", outer=outer, inner=inner)
    return f64(dev, _host("sum_inner", "a", a, outer * inner, "outer*inner").reshape(outer, inner).sum(axis=1))


@host_op("sum_rows")
def sum_rows(dev, a, rows: int, cols: int):
    check_positive("sum_rows", rows=rows, cols=cols)
    return f64(dev, _host("sum_rows", "a", a, rows * cols, "rows*cols").reshape(rows, cols).sum(axis=0))


# --- broadcast.py -----------------------------------------------------------------------

@host_op("add_broadcast")
def add_broadcast(dev, a, b, outer: int, inner: int):
    op = "add_broadcast"
    check_positive(op, outer=outer, inner=inner)
    x = _host(op, "a", a, outer * inner, "outer*inner").reshape(outer, inner)
    return f64(dev, x + _host(op, "b", b, outer, "outer")[:, None])


@host_op("add_per_col")
def add_per_col(dev, a, b, rows: int, cols: int):
    op = "add_per_col"
    check_positive(op, rows=rows, cols=cols)
    x = _host(op, "a", a, rows * cols, "rows*cols").reshape(rows, cols)
    return f64(dev, x + _host(op, "b", b, cols, "cols")[None, :])


# --- matmul.py --------------------------------------------------------------------------

@host_op("matmul_strided")
def matmul_strided(dev, a, b, batch: int, m: int, n: int, k: int,
                   trans_a: bool = False, trans_b: bool = False,
                   a_batch: bool = True, b_batch: bool = True, alpha: float = 1.0, op: str = "matmul",
                   bias=None, out_dtype: str | None = None):
    """C[z] = alpha * op(A[z]) @ op(B[z]) (+ bias) in float64 (BLAS), as matmul.matmul_strided."""
    check_positive(op, batch=batch, m=m, n=n, k=k)
    a_rows, a_cols = (k, m) if trans_a else (m, k)
    b_rows, b_cols = (n, k) if trans_b else (k, n)
    a_count, b_count = (batch if a_batch else 1), (batch if b_batch else 1)
    if a.dtype != b.dtype:
        raise ValueError(f"{op}: a and b must both be f32, f16, i32 or f64, got {a.dtype} and {b.dtype}")
    x = _host(op, "a", a, a_count * m * k, f"{'batch*' if a_batch and batch > 1 else ''}{a_rows}*{a_cols}")
    y = _host(op, "b", b, b_count * k * n, f"{'batch*' if b_batch and batch > 1 else ''}{b_rows}*{b_cols}")
    if out_dtype not in (None, "f64"):
        raise ValueError(f"{op}: out_dtype must be the operands' dtype (f64), got {out_dtype}")
    x = x.reshape(a_count, a_rows, a_cols)
    y = y.reshape(b_count, b_rows, b_cols)
    x = x.transpose(0, 2, 1) if trans_a else x
    y = y.transpose(0, 2, 1) if trans_b else y
    if a_count == 1 and b_count == 1:  # np.dot hands a transposed 2-D view to BLAS as it is
        product = np.dot(x[0], y[0])[None]
    else:  # (np.matmul falls back to a slow loop for non-contiguous stacks)
        product = np.matmul(np.ascontiguousarray(x), np.ascontiguousarray(y))
    if alpha != 1.0:
        product *= float(alpha)
    if bias is not None:
        if bias.dtype != "f64":
            raise ValueError(f"{op}: bias must be of the operands' float dtype (f64), got {bias.dtype}")
        product += _host(op, "bias", bias, n, "n")
    return f64(dev, np.broadcast_to(product, (batch, m, n)))


@host_op("matmul")
def matmul(dev, a, b, m: int, n: int, k: int):
    return matmul_strided(dev, a, b, 1, m, n, k, op="matmul")


@host_op("batch_matmul")
def batch_matmul(dev, a, b, batch: int, m: int, n: int, k: int):
    return matmul_strided(dev, a, b, batch, m, n, k, op="batch_matmul")


# --- softmax.py -------------------------------------------------------------------------

@host_op("softmax")
def softmax(dev, x, rows: int, cols: int, size=None):
    """Row softmax in float64: exp(x - max) / sum (a row with NaN, +inf or only -inf is all
    NaN, as torch). `size` (a GPU kernel choice) is ignored."""
    check_positive("softmax", rows=rows, cols=cols)
    v = _host("softmax", "x", x, rows * cols, "rows*cols").reshape(rows, cols)
    with np.errstate(invalid="ignore"):
        e = np.exp(v - v.max(axis=1, keepdims=True))
        return f64(dev, e / e.sum(axis=1, keepdims=True))


@host_op("softmax_backward")
def softmax_backward(dev, grad, y, rows: int, cols: int, size=None):
    """dx = y * (grad - sum_c grad*y) row by row, in float64 (`size` ignored)."""
    op = "softmax_backward"
    check_positive(op, rows=rows, cols=cols)
    g = _host(op, "grad", grad, rows * cols, "rows*cols").reshape(rows, cols)
    p = _host(op, "y", y, rows * cols, "rows*cols").reshape(rows, cols)
    with np.errstate(invalid="ignore"):
        return f64(dev, p * (g - (g * p).sum(axis=1, keepdims=True)))


def _causal_kept(op: str, rows: int, cols: int, length: int) -> np.ndarray:
    """[rows, cols] bools: row i of each block of `length` rows keeps columns c <= i."""
    check_positive(op, rows=rows, cols=cols, length=length)
    if rows % length:
        raise ValueError(f"{op}: rows ({rows}) must be a multiple of length ({length}): whole blocks of scores")
    return np.arange(cols)[None, :] <= (np.arange(rows) % length)[:, None]


@host_op("softmax_causal")
def softmax_causal(dev, x, rows: int, cols: int, length: int, size=None):
    """softmax(x + mask) in float64, the mask 0 where row i of each block of `length` rows
    keeps column c <= i and -inf elsewhere (NaN as torch's sum: a masked NaN or +inf makes
    the row NaN). `size` is ignored."""
    op = "softmax_causal"
    kept = _causal_kept(op, rows, cols, length)
    v = _host(op, "x", x, rows * cols, "rows*cols").reshape(rows, cols)
    with np.errstate(invalid="ignore"):
        v = v + np.where(kept, 0.0, -np.inf)
        e = np.exp(v - v.max(axis=1, keepdims=True))
        return f64(dev, e / e.sum(axis=1, keepdims=True))


@host_op("softmax_causal_backward")
def softmax_causal_backward(dev, grad, y, rows: int, cols: int, length: int, size=None):
    """dx = y * (grad - sum_c grad*y) row by row in float64, y taken as 0 at the masked
    columns (softmax_causal's output is). `size` is ignored."""
    op = "softmax_causal_backward"
    kept = _causal_kept(op, rows, cols, length)
    g = _host(op, "grad", grad, rows * cols, "rows*cols").reshape(rows, cols)
    p = np.where(kept, _host(op, "y", y, rows * cols, "rows*cols").reshape(rows, cols), 0.0)
    with np.errstate(invalid="ignore"):
        return f64(dev, p * (g - (g * p).sum(axis=1, keepdims=True)))


# --- index.py ---------------------------------------------------------------------------

def _axis_index(dev, op: str, index, outer: int, dim_size: int, n_index: int, inner: int, per_element: bool):
    """The [outer, n_index, inner] index t into the axis (negative ones counted from the end)
    and where it lies in [0, dim_size)."""
    if per_element:
        t = _indices(dev, op, "index", index, outer * n_index * inner, "outer*n_index*inner")
        t = t.reshape(outer, n_index, inner)
    else:
        t = _indices(dev, op, "index", index, n_index, "n_index")
        t = np.broadcast_to(t.reshape(1, n_index, 1), (outer, n_index, inner))
    t = np.where(t < 0, t + dim_size, t)
    return t, (t >= 0) & (t < dim_size)


@host_op("gather_axis")
def gather_axis(dev, x, index, outer: int, dim_size: int, n_index: int, inner: int,
                per_element: bool = False):
    """out[o, j, i] = x[o, index[..], i] in float64 (see index.gather_axis); NaN out of range."""
    check_buffer("gather", "x", x, outer * dim_size * inner, "outer*dim_size*inner")
    t, valid = _axis_index(dev, "gather", index, outer, dim_size, n_index, inner, per_element)
    v = _host("gather", "x", x)
    if t.size == 0:
        return f64(dev, np.zeros(0))
    if dim_size == 0:
        raise ValueError(f"gather: cannot index into an empty axis ({n_index} indices into size 0)")
    picked = np.take_along_axis(v.reshape(outer, dim_size, inner), np.where(valid, t, 0), axis=1)
    return f64(dev, np.where(valid, picked, np.nan))


@host_op("scatter_add_axis")
def scatter_add_axis(dev, src, index, outer: int, dim_size: int, n_index: int, inner: int,
                     per_element: bool = False, skip: int = -1):
    """out [outer, dim_size, inner] = 0, out[o, index[..], i] += src[o, j, i] in float64, in
    index order; entries whose (wrapped) index is `skip` or out of range add nothing."""
    check_buffer("scatter_add", "src", src, outer * n_index * inner, "outer*n_index*inner")
    t, valid = _axis_index(dev, "scatter_add", index, outer, dim_size, n_index, inner, per_element)
    v = _host("scatter_add", "src", src)
    out = np.zeros((outer, dim_size, inner))
    if t.size and dim_size:
        keep = valid & (t != skip)
        o, _, i = np.indices(t.shape)
        np.add.at(out, (o[keep], t[keep], i[keep]), v.reshape(t.shape)[keep])
    return f64(dev, out)


# --- intmath.py -------------------------------------------------------------------------

@host_op("sort_rows")
def sort_rows(dev, x, rows: int, n: int, descending: bool = False):
    """The i32 permutation that sorts each row of float64 x [rows, n]: stable, NaN largest."""
    v = _host("sort", "x", x, rows * n, "rows*n").reshape(rows, n)
    if rows * n == 0:
        return dev.empty(0, "i32")
    if descending:  # NaN first, then larger values; lexsort is stable (its last key is the primary one)
        order = np.lexsort((-np.nan_to_num(v, nan=0.0), ~np.isnan(v)), axis=-1)
    else:
        order = np.argsort(v, axis=1, kind="stable")  # numpy sorts NaN last
    return _result(dev, order, "i32")


@host_op("index_put")
def index_put(dev, dst, positions, src):
    """dst[positions[i]] = src[i] in place for float64 dst and src (positions outside dst are
    skipped; of repeated positions the last write stays)."""
    where = _indices(dev, "index_put", "positions", positions)
    check_buffer("index_put", "src", src, positions.len, "len(positions)")
    check_buffer("index_put", "dst", dst)
    if src.dtype != dst.dtype:
        raise ValueError(f"index_put: src is {src.dtype} but dst is {dst.dtype}")
    inside = (where >= 0) & (where < dst.len)
    dst.arr[where[inside]] = src.arr[inside]
    return dst


# --- random.py --------------------------------------------------------------------------

def _pcg_hash(v: np.ndarray) -> np.ndarray:
    """kernels/dropout.wgsl's hash on uint32 words (wrapping as WGSL's u32 arithmetic)."""
    state = v * np.uint32(747796405) + np.uint32(2891336453)
    word = ((state >> ((state >> np.uint32(28)) + np.uint32(4))) ^ state) * np.uint32(277803737)
    return (word >> np.uint32(22)) ^ word


@host_op("dropout")
def dropout(dev, x, p: float, seed: int):
    """x * keep / (1 - p) with the GPU op's mask: keep[i] from the same hash of (seed, i), so a
    float64 tensor loses the elements a float32 one would with that seed. Dropped elements
    are 0 even where x is inf or NaN (the GPU op selects rather than multiplies)."""
    v = _host("dropout", "x", x)
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    threshold = min(int(p * 2.0**32), 2**32 - 1)
    with np.errstate(over="ignore"):
        index = np.arange(v.size, dtype=np.uint32)
        h = _pcg_hash(_pcg_hash(index ^ np.uint32(seed & 0xFFFFFFFF)) + np.uint32(seed >> 32))
    return f64(dev, np.where(h >= threshold, v * (1.0 / (1.0 - p)), 0.0))
