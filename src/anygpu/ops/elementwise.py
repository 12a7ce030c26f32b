"""Elementwise ops of the seed and their backward kernels (Layer 0).

Each op: check arguments, pick the kernel (one template, an expression per op and element
kind), launch. `unary` and `binary` dispatch on the Buffers' dtype: float expressions serve
f32 and f16 (computed in f32), INT_* serve i32, BOOL_* serve bool; COMPARISONS serve every
dtype. The output has the input's dtype, except comparisons (f32 0/1 unless `out_dtype`
says bool, i32, ...)."""

from __future__ import annotations

import functools

from ..runtime import Buffer, Params, load_shader
from ..runtime.device import WORKGROUPS_PER_DIM
from ..runtime.dtypes import DTYPES
from . import fusion
from ._common import WORKGROUP_1D, check_buffer, check_same_len

# The Layer-0 ops (Device methods); the tables and helpers below serve the other op modules.
__all__ = ["unary", "binary", "add", "sub", "mul", "scale", "relu", "sigmoid", "swish", "tanh_act",
           "relu_backward", "sigmoid_backward", "swish_backward", "tanh_backward"]

def _nan(x: str) -> str:
    """WGSL test that f32 `x` is NaN. Compilers may assume no NaN and fold `x != x` to
    false (lavapipe does), so the test reads the bits."""
    return f"((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)"


def _pow_expr(base: str, exponent: str, scalar: bool = False) -> str:
    """base ** exponent as torch: real results for negative bases and integer exponents,
    x ** 0 = 1 (NaN too), NaN ** y = NaN, 0 ** negative = inf (-inf for -0 and odd y),
    (+-inf) ** y by IEEE's rules whatever the driver's pow does there (NVIDIA's gave NaN for
    inf ** 1.5), NaN for a negative base and a non-integer exponent. `scalar`: a Python
    exponent, where torch takes x ** 0.5 as sqrt(x) and x ** -0.5 as 1 / sqrt(x)
    ((-inf) ** 0.5 is NaN there, not IEEE's inf)."""
    odd = f"abs({exponent} - 2.0 * floor({exponent} * 0.5)) == 1.0"
    # A NaN built from the base's bits: Tint (Dawn) refuses a NaN or inf that a constant
    # expression makes, and a compiler may fold arithmetic such as x - x.
    nan = f"bitcast<f32>(bitcast<u32>({base}) | 0x7fc00000u)"
    core = (f"select(select(select(pow(abs({base}), {exponent}), -pow(abs({base}), {exponent}), {odd}),"
            f" pow({base}, {exponent}), {base} >= 0.0), {nan}, {base} < 0.0 && {exponent} != floor({exponent}))")
    # An infinite base: inf (0 for a negative exponent), negative for -inf and odd exponents.
    magnitude = f"select(0.0, abs({base}), {exponent} > 0.0)"
    at_inf = f"select({magnitude}, -{magnitude}, {base} < 0.0 && {odd})"
    core = f"select({core}, {at_inf}, {_inf(base)} && !{_nan(exponent)})"
    core = f"select({core}, 1.0, {exponent} == 0.0)"
    # Exponents -1, 2, 3 exactly, as torch: exp2(y * log2(x)) loses bits near 1e38.
    core = (f"select(select(select({core}, {base} * {base} * {base}, {exponent} == 3.0), {base} * {base},"
            f" {exponent} == 2.0), 1.0 / {base}, {exponent} == -1.0)")
    if scalar:
        root = f"select(sqrt({base}), {nan}, {base} < 0.0)"
        core = f"select(select({core}, {root}, {exponent} == 0.5), 1.0 / {root}, {exponent} == -0.5)"
    # inf, with the base's sign for odd exponents. Built from the base's bits: Tint (Dawn)
    # refuses an inf that a constant expression makes (bitcast<f32>(0x7f800000u)).
    signed = f"({odd} || {exponent} == -0.5)" if scalar else odd  # torch: 1 / sqrt(-0) = -inf
    at_zero = f"bitcast<f32>(select(0x7f800000u, 0x7f800000u | (bitcast<u32>({base}) & 0x80000000u), {signed}))"
    return (f"select(select({core}, {base}, {_nan(base)} && {exponent} != 0.0), {at_zero},"
            f" {base} == 0.0 && {exponent} < 0.0)")


def _expm1(x: str) -> str:
    """WGSL exp(x) - 1 without the cancellation near 0 (torch's expm1): a Taylor polynomial
    for |x| < 0.1 (relative error below 2e-9), exp(x) - 1 beyond."""
    series = f"{x} * (1.0 + {x} * (0.5 + {x} * (0.16666667 + {x} * (0.041666668 + {x} * 0.008333334))))"
    return f"select(exp({x}) - 1.0, {series}, abs({x}) < 0.1)"


def _tanh(x: str) -> str:
    """WGSL tanh(x) to float32 accuracy (drivers' tanh lost 1.3% at 1e-6, lavapipe's built
    from exp, and rounded 8.35 to 1): an odd Taylor polynomial below |x| 0.3 (truncation
    error < 1e-10 relative), 1 - 2 / (exp(2|x|) + 1) with x's sign beyond (no cancellation)."""
    square = f"({x} * {x})"
    series = (f"{x} * (1.0 + {square} * (-0.33333334 + {square} * (0.13333334 + {square} * (-0.053968254"
              f" + {square} * (0.021869488 + {square} * (-0.008863236 + {square} * 0.0035921280))))))")
    tail = f"sign({x}) * (1.0 - 2.0 / (exp(2.0 * abs({x})) + 1.0))"
    return f"select({tail}, {series}, abs({x}) < 0.3)"


def _inf(x: str) -> str:
    """WGSL test that f32 `x` is +-inf, from its bits (see _nan)."""
    return f"((bitcast<u32>({x}) & 0x7fffffffu) == 0x7f800000u)"


def _frexp(v: str, exponent: bool) -> str:
    """WGSL of frexp's mantissa (or, `exponent`, its exponent as an f32) of f32 `v`, read from
    the bits: |mantissa| in [0.5, 1), 0, inf and NaN give themselves and exponent 0. A
    subnormal is normalised by its leading zeros (countLeadingZeros), not by arithmetic: on
    the H200 the arithmetic form (x * 2 ** 64, tests of |x| == 0) returned a subnormal x as
    it returns 0, so the device flushes subnormal operands to 0 (WGSL allows it)."""
    bits = f"bitcast<u32>({v})"
    field = f"(({bits} >> 23u) & 0xffu)"  # the biased exponent
    fraction = f"({bits} & 0x7fffffu)"
    zeros = f"countLeadingZeros({fraction})"  # 9..31 for a subnormal: its leading 1 at bit 31 - zeros
    itself = f"({field} == 0xffu || ({bits} & 0x7fffffffu) == 0u)"  # inf, NaN, +-0
    if exponent:
        return f"f32(select(select(i32({field}) - 126, -117 - i32({zeros}), {field} == 0u), 0, {itself}))"
    top = f"(({bits} & 0x80000000u) | 0x3f000000u)"  # the sign, and 2 ** -1
    normal = f"bitcast<f32>({top} | {fraction})"
    subnormal = f"bitcast<f32>({top} | (({fraction} << ({zeros} - 8u)) & 0x7fffffu))"  # leading 1 to bit 23, dropped
    return f"select(select({normal}, {subnormal}, {field} == 0u), {v}, {itself})"


# Expressions of `v` (input), `alpha`, `beta` (parameters).
UNARY = {
    "scale": "v * alpha",
    "add_scalar": "v + alpha",
    # NaN stays NaN, as in torch. WGSL lets compilers assume no NaN, so `v != v` may fold to
    # false; the bit test survives.
    "relu": "select(0.0, v, v >= 0.0 || (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)",  # relu(-0) = -0
    "sigmoid": "1.0 / (1.0 + exp(-v))",
    "silu": "v / (1.0 + exp(-v))",
    # tanh via exp of a clamped argument: WGSL's tanh may return NaN for large |v| on some drivers.
    "tanh": f"select({_tanh('clamp(v, -15.0, 15.0)')}, v, {_nan('v')})",
    "neg": "-v",
    "exp": "exp(v)",
    "log": "log(v)",
    "sqrt": "sqrt(v)",
    "abs": "abs(v)",
    "square": "v * v",
    "reciprocal": "1.0 / v",
    "clamp": f"select(clamp(v, alpha, beta), v, {_nan('v')})",  # NaN stays NaN, as in torch
    "gelu": "0.5 * v * (1.0 + erf_approx(v * 0.70710678118))",
    "gelu_tanh": "0.5 * v * (1.0 + tanh(clamp(0.7978845608 * (v + 0.044715 * v * v * v), -15.0, 15.0)))",
    "sign": "sign(v)",
    "signbit": "select(0.0, 1.0, (bitcast<u32>(v) >> 31u) == 1u)",  # the sign bit itself: -0 and -NaN too
    "frexp_mantissa": _frexp("v", exponent=False),  # Tensor.frexp (bits, subnormals included)
    "frexp_exponent": _frexp("v", exponent=True),
    "floor": "floor(v)",
    "ceil": "ceil(v)",
    "round": "round(v)",
    "trunc": "trunc(v)",
    "inside": "select(0.0, 1.0, v >= alpha && v <= beta)",
    "fill": "alpha",
    # Scalar operands of Tensor arithmetic (one launch instead of a fill plus a broadcast).
    "div_scalar": "v / alpha",
    "rsub_scalar": "alpha - v",
    "rdiv_scalar": "alpha / v",
    # v ** alpha with torch's real results for negative bases and integer exponents.
    "pow_scalar": _pow_expr("v", "alpha", scalar=True),
    # log(1 + v), accurate for |v| < 0.1 by its series to v^10 (1 + v rounds v away, and
    # drivers' log is least accurate near 1: lavapipe's is off by ~5e-8 there).
    "log1p": "select(log(1.0 + v), v * " + "".join(f"({1 / k:.9g} - v * " for k in range(1, 10)) + "0.1"
             + ")" * 9 + ", abs(v) < 0.1)",
    "sin": "sin(v)",
    "cos": "cos(v)",
    "atan": "atan(v)",
    # through atan: lavapipe's asin/acos are off by ~4e-4
    "asin": "atan(v / sqrt(1.0 - v * v))",
    "acos": "1.5707963268 - atan(v / sqrt(1.0 - v * v))",
    # erf: Abramowitz-Stegun 7.1.26 (abs error 1.5e-7), its series near 0 where that error is relative
    "erf": "select(erf_approx(v), 1.1283791671 * v * (1.0 - v * v * (0.333333333 - v * v * 0.1)), abs(v) < 0.05)",
    "leaky_relu": "select(v * alpha, v, v > 0.0)",
    "elu": f"select(select(alpha * {_expm1('select(v, 0.0, v > 0.0)')}, v, v > 0.0), v, {_nan('v')})",  # -0 kept
    # softplus with threshold beta (torch: x itself above it), alpha = beta parameter.
    "softplus": "select(log(1.0 + exp(v * alpha)) / alpha, v, v * alpha > beta)",
    "softplus_grad": "select(1.0 / (1.0 + exp(-v * alpha)), 1.0, v * alpha > beta)",
}

# Expressions of `a`, `b` and `alpha`.
BINARY = {
    "add": "a + b",
    "sub": "a - b",
    "mul": "a * b",
    "div": "a / b",
    # a**b: pow() alone is NaN for a < 0, but torch gives a real result when b is an integer.
    "pow": _pow_expr("a", "b"),
    # NaN in either operand gives NaN, as in torch (a + b is that NaN).
    "maximum": f"select(max(a, b), a + b, {_nan('a')} || {_nan('b')})",
    "minimum": f"select(min(a, b), a + b, {_nan('a')} || {_nan('b')})",
    # a * b where mask b is nonzero, else 0 even for an infinite or NaN a: backward rules
    # route gradients with it (select, not multiply: inf * 0 would be NaN).
    "mask_mul": "select(0.0, a * b, b != 0.0)",
    "relu_backward": f"select(0.0, a, b > 0.0 || {_nan('b')})",  # a = grad, b = x (torch: 0 only where x <= 0)
    "sigmoid_backward": "a * b * (1.0 - b)",              # b = y = sigmoid(x)
    "silu_backward": "a * (1.0 / (1.0 + exp(-b))) * (1.0 + b * (1.0 - 1.0 / (1.0 + exp(-b))))",  # b = x
    "tanh_backward": "a * (1.0 - b * b)",                 # b = y = tanh(x)
    # d gelu / dx = Phi(x) + x phi(x), b = x
    "gelu_backward": "a * (0.5 * (1.0 + erf_approx(b * 0.70710678118)) + b * 0.3989422804 * exp(-0.5 * b * b))",
    # d/dx of gelu_tanh: 0.5 (1 + t) + 0.5 x (1 - t^2) u', t = tanh(u), u = 0.79788456 (x + 0.044715 x^3), b = x
    "gelu_tanh_backward": "a * (0.5 * (1.0 + tanh(clamp(0.7978845608 * (b + 0.044715 * b * b * b), -15.0, 15.0)))"
                          " + 0.5 * b * (1.0 - tanh(clamp(0.7978845608 * (b + 0.044715 * b * b * b), -15.0, 15.0)) * tanh(clamp(0.7978845608 * (b + 0.044715 * b * b * b), -15.0, 15.0)))"
                          " * 0.7978845608 * (1.0 + 0.134145 * b * b))",
    "leaky_relu_backward": "select(a * alpha, a, b > 0.0)",                        # b = x
    "elu_backward": "select(a * alpha * exp(min(b, 0.0)), a, b > 0.0)",            # b = x
    # The share of d max(a, b) (d min(a, b)) that goes to a: ties split evenly, as in torch.
    # a's share of the gradient: 1 where a wins, 1/2 on ties, 1 with a NaN on either side
    # (torch gives both inputs the whole gradient there); b's share is share(b, a).
    "maximum_share": f"select(select(select(0.0, 0.5, a == b), 1.0, a > b), 1.0, {_nan('a')} || {_nan('b')})",
    "minimum_share": f"select(select(select(0.0, 0.5, a == b), 1.0, a < b), 1.0, {_nan('a')} || {_nan('b')})",
    # 1 where a is b or both are NaN: the elements a full max/min came from (torch shares its
    # gradient among the NaNs when the result is NaN).
    "same": f"select(0.0, 1.0, a == b || ({_nan('a')} && {_nan('b')}))",
}


# Integer (i32) elements: exact, wrapping at 32 bits. `//` and `%` round toward -inf as
# in torch (floor_divide, remainder); `pow` takes non-negative integer exponents.
INT_UNARY = {
    "neg": "-v",
    "abs": "abs(v)",
    "square": "v * v",
    "sign": "select(select(0, -1, v < 0), 1, v > 0)",
    "relu": "max(v, 0)",
    "scale": "v * alpha",
    "add_scalar": "v + alpha",
    "clamp": "clamp(v, alpha, beta)",
    "fill": "alpha",
    "bitwise_not": "~v",
}
INT_BINARY = {
    "add": "a + b",
    "sub": "a - b",
    "mul": "a * b",
    "floor_divide": "int_floor_div(a, b)",
    "remainder": "int_floor_mod(a, b)",
    "pow": "int_pow(a, b)",
    "maximum": "max(a, b)",
    "minimum": "min(a, b)",
    "bitwise_and": "a & b",
    "bitwise_or": "a | b",
    "bitwise_xor": "a ^ b",
}
# bool elements are 0/1 words.
BOOL_UNARY = {"logical_not": "1u - v", "fill": "alpha"}
BOOL_BINARY = {"logical_and": "a & b", "logical_or": "a | b", "logical_xor": "a ^ b"}
# Comparisons of any kind of element; the kernel converts the 0/1 word to the output dtype.
COMPARISONS = {
    "eq": "select(0u, 1u, a == b)",
    "ne": "select(0u, 1u, a != b)",
    "lt": "select(0u, 1u, a < b)",
    "le": "select(0u, 1u, a <= b)",
    "gt": "select(0u, 1u, a > b)",
    "ge": "select(0u, 1u, a >= b)",
}
# Floats: NaN compares unequal to everything, itself included (bit tests, see _nan).
FLOAT_COMPARISONS = {
    "eq": f"select(0u, 1u, a == b && !{_nan('a')} && !{_nan('b')})",
    "ne": f"select(0u, 1u, a != b || {_nan('a')} || {_nan('b')})",
    **{name: f"select(0u, 1u, a {sign} b && !{_nan('a')} && !{_nan('b')})"
       for name, sign in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="))},
}
_TABLES = {"float": (UNARY, BINARY), "int": (INT_UNARY, INT_BINARY), "uint": ({}, {}),
           "bool": (BOOL_UNARY, BOOL_BINARY)}

UNARY_PARAMS = Params("n: u32", "alpha: C", "beta: C")
BINARY_PARAMS = Params("n: u32", "alpha: C")


def expression(op: str, name: str, dtype: str, arity: int) -> str:
    """The WGSL expression of elementwise op `name` on `dtype` elements (arity 1 or 2),
    or ValueError naming the op, the dtype and what exists for it."""
    kind = DTYPES[dtype].kind
    table = _TABLES[kind][arity - 1]
    if arity == 2 and name in COMPARISONS:
        return (FLOAT_COMPARISONS if kind == "float" else COMPARISONS)[name]
    if name not in table:
        known = sorted(table) + (sorted(COMPARISONS) if arity == 2 else [])
        raise ValueError(f"{op}: {name!r} is not defined for {dtype} elements "
                         f"(for {dtype}: {', '.join(known) or 'none'})")
    return table[name]


def out_dtype_of(name: str, dtype: str, out_dtype: str | None) -> str:
    """The result dtype: the input's, or for comparisons `out_dtype` (default f32 0/1,
    the Tensor layer's mask storage)."""
    if name in COMPARISONS:
        return out_dtype or "f32"
    if out_dtype not in (None, dtype):
        raise ValueError(f"{name}: out_dtype {out_dtype!r} is only for comparisons; the result is {dtype}")
    return dtype


def scalar_param(dtype: str, value):
    """A parameter of a C-typed Params field as struct packs it (float, or int for integer kinds)."""
    return float(value) if DTYPES[dtype].kind == "float" else int(value)


@functools.lru_cache(maxsize=None)
def source(template: str, expr: str, params: Params, dtype: str = "f32", out_dtype: str | None = None,
           **subs) -> str:
    """The kernel text of `template` for `expr` on `dtype` elements (cached: one string object
    per kernel, which the device's pipeline cache then hashes once)."""
    return load_shader(template, dtype, out_dtype, EXPR=expr, **params.subs(dtype), **subs)


def grid(dev, threads: int):
    """The workgroup grid of a 1-D elementwise kernel over `threads` threads."""
    groups = -(-threads // WORKGROUP_1D)
    return (groups, 1, 1) if groups <= WORKGROUPS_PER_DIM else dev.grid(groups)


def unary(dev, name: str, x, alpha: float = 0.0, beta: float = 0.0, out=None):
    """out[i] = f(x[i]) for the unary op `name` of x's dtype (UNARY for f32/f16, INT_UNARY
    for i32, BOOL_UNARY for bool); `out` may be given to write in place of a new buffer.
    f32 and f16 results without `out` are deferred and fused with the ops around them (fusion.py)."""
    if not isinstance(x, Buffer):
        check_buffer(name, "x", x)
    dtype = x.dtype
    if name == "signbit" and dtype == "f16":
        return _signbit_f16(dev, x, out)
    if out is None and dtype in fusion.FUSABLE and dev.fuse:  # the hot path of small ops
        return fusion.defer_unary(dev, name, UNARY.get(name) or expression(name, name, dtype, 1), x,
                                  float(alpha), float(beta))
    expr = expression(name, name, dtype, 1)
    if out is None:
        out = dev.empty(x.len, dtype)
    launch_unary(dev, name, expr, x, out, alpha, beta)
    return out


# signbit of f16 elements, two halves a u32 word: bit 15 of each half, written as the f16
# 1.0 (0x3c00) or 0 in the same place. Not the f32 expression on a widened half: the H200
# widens an f16 NaN to a positive f32 NaN, losing the sign bit signbit reads.
_SIGNBIT_F16_WORDS = "select(0u, 0x3c00u, (v & 0x8000u) != 0u) | select(0u, 0x3c000000u, (v & 0x80000000u) != 0u)"


def _signbit_f16(dev, x, out=None):
    """unary "signbit" of an f16 Buffer (f16 1.0 where the sign bit is set, else 0), read from
    the halves' bits: the u32 kernel runs over the words of x and of out (Buffers hold whole
    words, so an odd length's last word has room for its padding half)."""
    if out is None:
        out = dev.empty(x.len, "f16")
    kernel = dev.op_kernels.get("signbit_f16")
    if kernel is None:
        kernel = dev.op_kernels["signbit_f16"] = dev.kernel(
            "signbit_f16", source("unary.wgsl", _SIGNBIT_F16_WORDS, UNARY_PARAMS, "u32"), 1, 1,
            UNARY_PARAMS.format("u32"))
    words = -(-x.len // 2)
    dev.launch(kernel, (x,), (out,), (words, 0, 0), grid(dev, words))
    return out


def launch_unary(dev, name: str, expr: str, x, out, alpha, beta) -> None:
    """Record the kernel of unary expression `expr` from x into out (same length and dtype)."""
    dtype, n = x.dtype, x.len
    vec4 = n % 4 == 0  # vec4: wider loads and stores
    entry = dev.op_kernels.get((expr, dtype, vec4, 1))
    if entry is None:  # first use on this device: the kernel and how its scalars are packed
        kernel = dev.kernel(name, source("unary_vec4.wgsl" if vec4 else "unary.wgsl", expr, UNARY_PARAMS,
                                         dtype), 1, 1, UNARY_PARAMS.format(dtype))
        entry = dev.op_kernels[(expr, dtype, vec4, 1)] = (kernel, float if DTYPES[dtype].kind == "float" else int)
    kernel, scalar = entry
    threads = n // 4 if vec4 else n
    dev.launch(kernel, (x,), (out,), (threads, scalar(alpha), scalar(beta)), grid(dev, threads))


def binary(dev, name: str, a, b, alpha: float = 0.0, out_dtype: str | None = None):
    """out[i] = f(a[i], b[i]) for equal-length a and b of one dtype (BINARY for f32/f16,
    INT_BINARY for i32, BOOL_BINARY for bool, COMPARISONS for all). f32 and f16 results (comparisons
    give f32 0/1 by default) are deferred and fused with the ops around them (fusion.py)."""
    check_same_len(name, a, b)
    dtype = check_same_dtype(name, a, b)
    expr = expression(name, name, dtype, 2)
    result = out_dtype_of(name, dtype, out_dtype)
    if dev.fuse and result == dtype and dtype in fusion.FUSABLE:
        return fusion.defer_binary(dev, name, expr, a, b, float(alpha))
    out = dev.empty(a.len, result)
    launch_binary(dev, name, expr, a, b, out, alpha)
    return out


def launch_binary(dev, name: str, expr: str, a, b, out, alpha) -> None:
    """Record the kernel of binary expression `expr` of a and b into out (its dtype may be
    a comparison's)."""
    dtype, n = a.dtype, a.len
    vec4 = n % 4 == 0
    entry = dev.op_kernels.get((expr, dtype, vec4, out.dtype))
    if entry is None:
        kernel = dev.kernel(name, source("binary_vec4.wgsl" if vec4 else "binary.wgsl", expr, BINARY_PARAMS,
                                         dtype, out.dtype), 2, 1, BINARY_PARAMS.format(dtype))
        entry = dev.op_kernels[(expr, dtype, vec4, out.dtype)] = (
            kernel, float if DTYPES[dtype].kind == "float" else int)
    kernel, scalar = entry
    threads = n // 4 if vec4 else n
    dev.launch(kernel, (a, b), (out,), (threads, scalar(alpha)), grid(dev, threads))


def check_same_dtype(op: str, a, b) -> str:
    if a.dtype != b.dtype:
        raise ValueError(f"{op}: a is {a.dtype} but b is {b.dtype}; cast one first (dev.cast)")
    return a.dtype


def add(dev, a, b):
    """a + b elementwise (equal lengths)."""
    return binary(dev, "add", a, b)


def sub(dev, a, b):
    """a - b elementwise."""
    return binary(dev, "sub", a, b)


def mul(dev, a, b):
    """a * b elementwise."""
    return binary(dev, "mul", a, b)


def scale(dev, a, s: float):
    """a * s for a scalar s."""
    return unary(dev, "scale", a, float(s))


def relu(dev, a):
    return unary(dev, "relu", a)


def sigmoid(dev, a):
    return unary(dev, "sigmoid", a)


def swish(dev, a):
    """x * sigmoid(x) (SiLU)."""
    return unary(dev, "silu", a)


def tanh_act(dev, a):
    return unary(dev, "tanh", a)


def relu_backward(dev, grad, x):
    """grad * (x > 0)."""
    return binary(dev, "relu_backward", grad, x)


def sigmoid_backward(dev, grad, y):
    """grad * y * (1 - y), y = sigmoid(x) (the forward output)."""
    return binary(dev, "sigmoid_backward", grad, y)


def swish_backward(dev, grad, x):
    """grad * (s + x s (1 - s)), s = sigmoid(x) (x is the forward input)."""
    check_same_len("swish_backward", grad, x)  # errors name the seed's op
    return binary(dev, "silu_backward", grad, x)


def tanh_backward(dev, grad, y):
    """grad * (1 - y^2), y = tanh(x) (the forward output)."""
    return binary(dev, "tanh_backward", grad, y)
