"""torch-compat additions (see compat_common.py): METHODS for Tensor, FUNCTIONS for torch.*.

Elementwise math torch has and anygpu lacked, composed from the recorded Tensor ops (so
autograd, dtypes, float16/float64 and NaN rules come with them): addcmul/addcdiv, the
inverse hyperbolic functions, erfc, exp2, i0, logaddexp, xlogy, copysign, nan_to_num,
frexp, gcd/lcm and the like; torch's aliases (arccos, multiply, greater, ...); and the
in-place form `name_` of each elementwise op (made by `_inplace`: same value as the
out-of-place op, written into self in self's dtype, a leaf that requires grad refused).
"""

from __future__ import annotations

import math
from collections import namedtuple

from .. import dtypes
from ..dtypes import float16, float32, float64, int32
from ..ops import gpu
from .compat_common import method_function
from .core import Tensor, _is_int, bool_
from .creation import full, zeros
from .elementwise import _cast, _float_operands, _result_dtype, _to_tensor
from .function import Function
from .indexing import where
from .inplace import _inplace

METHODS: dict = {}
FUNCTIONS: dict = {}

_LN2 = math.log(2.0)

FrexpResult = namedtuple("frexp", ["mantissa", "exponent"])  # type: ignore[name-match]  # torch.return_types.frexp


def _method(fn):
    """Register fn as Tensor.<fn.__name__>."""
    METHODS[fn.__name__] = fn
    return fn


def _constant(value: float, like: Tensor) -> Tensor:
    """A 0-d tensor for a constant beside float tensor `like`: float64 for float64 (a bare
    Python float would be float32, and 1e300 would overflow), else float32 (a 0-d float32
    operand leaves a float16 result float16; `where` refuses a 0-d float16 one)."""
    return full((), value, dtype=float64 if like.dtype is float64 else float32)


def _floating(x: Tensor) -> Tensor:
    """x, or x converted to the default float dtype where it is bool or integer (torch's
    result type for float-valued ops on integers)."""
    return x if x.dtype.is_floating_point else _cast(x, dtypes.default_float())


def _in_float32(op, x: Tensor) -> Tensor:
    """op(x) computed in float32 for float16 input (the polynomial forms lose too much in
    half), the result converted back; float32 and float64 as they are."""
    if x.dtype is float16:
        return _cast(op(_cast(x, float32)), float16)
    return op(x)


def _half_in_float32(fn):
    """fn computed in float32 where its result would be float16, rounded to float16 once at the
    end (torch's half kernels compute in float32 too; the composed forms lose too much in half)."""
    def wrapper(self, *args, **kwargs):
        operands = (self, *args[:1])  # the tensor operands: self and, for a binary op, other
        result = _result_dtype(self, args[0]) if args else _to_tensor(self).dtype
        if result is not float16:
            return fn(self, *args, **kwargs)
        wide = [_cast(a, float32) if isinstance(a, Tensor) and a.dtype is float16 else a for a in operands]
        return _cast(fn(*wide, *args[1:], **kwargs), float16)
    wrapper.__name__ = wrapper.__qualname__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


def _both(input, other) -> tuple[Tensor, Tensor]:
    """Two operands as tensors, a Python float beside a float64 tensor kept float64."""
    if not isinstance(input, Tensor):
        input = _to_tensor(input, other if isinstance(other, Tensor) else None)
    return input, _to_tensor(other, input)


# ------------------------------------------------------------------ optimizer arithmetic
@_method
def addcmul(self, tensor1, tensor2, *, value=1):
    """self + value * tensor1 * tensor2 (broadcast together); an integer result refuses a
    float value, as torch."""
    if isinstance(value, float) and not any(_to_tensor(t).dtype.is_floating_point for t in (self, tensor1, tensor2)):
        raise ValueError(f"addcmul: for integer tensors value must not be a float, got {value!r}")
    product = tensor1 * tensor2
    return self + (product if value == 1 else product * value)


@_method
def addcdiv(self, tensor1, tensor2, *, value=1):
    """self + value * tensor1 / tensor2 (broadcast together); integer tensor1 and tensor2 are
    refused, as torch (integer division is no longer supported there)."""
    t1, t2 = _to_tensor(tensor1), _to_tensor(tensor2)
    if not t1.dtype.is_floating_point and not t2.dtype.is_floating_point:
        raise ValueError(f"addcdiv: integer division of tensor1 ({t1.dtype}) by tensor2 ({t2.dtype}) is not "
                         f"supported; convert one to a float dtype")
    quotient = tensor1 / tensor2
    return self + (quotient if value == 1 else quotient * value)


@_method
def rsub(self, other, alpha=1):
    """other - alpha * self (torch.rsub)."""
    return other - (self if alpha == 1 else self * alpha)


# ------------------------------------------------------------------ angles, powers, logs
@_method
@_half_in_float32
def deg2rad(self):
    return _floating(self) * (math.pi / 180.0)


@_method
@_half_in_float32
def rad2deg(self):
    return _floating(self) * (180.0 / math.pi)


@_method
def exp2(self):
    """2 ** self (exact at integers: the pow kernel is exp2 of x * log2(2))."""
    x = _floating(self)
    return _constant(2.0, x) ** x


@_method
@_half_in_float32
def ldexp(self, other):
    """self * 2 ** other, in a float dtype."""
    x, e = _both(self, other)
    e = _floating(e) if x.dtype.is_floating_point else e
    scale = exp2(e)
    return _floating(x) * scale


@_method
def float_power(self, exponent):
    """self ** exponent computed in float64, whatever the dtypes, as torch."""
    base = _cast(self, float64)
    if isinstance(exponent, Tensor):
        return base ** _cast(exponent, float64)
    return base ** float(exponent)


@_method
@_half_in_float32
def logaddexp(self, other):
    """log(exp(self) + exp(other)) without overflow: max + log1p(exp(-|self - other|));
    equal infinities give themselves."""
    a, b = _both(_floating(_to_tensor(self)), other)
    b = _floating(b)
    same_inf = a.isinf() & (a == b)
    safe_b = where(same_inf, _constant(0.0, b), b)
    safe_a = where(same_inf, _constant(0.0, a), a)
    out = safe_a.maximum(safe_b) + (-(safe_a - safe_b).abs()).exp().log1p()
    return where(same_inf, a, out)


@_method
@_half_in_float32
def logaddexp2(self, other):
    """log2(2 ** self + 2 ** other) without overflow."""
    a, b = _both(_floating(_to_tensor(self)), other)
    b = _floating(b)
    same_inf = a.isinf() & (a == b)
    safe_b = where(same_inf, _constant(0.0, b), b)
    safe_a = where(same_inf, _constant(0.0, a), a)
    out = safe_a.maximum(safe_b) + exp2(-(safe_a - safe_b).abs()).log1p() * (1.0 / _LN2)
    return where(same_inf, a, out)


@_method
@_half_in_float32
def xlogy(self, other):
    """self * log(other), 0 where self is 0 (also for other 0 or inf), NaN where other is NaN."""
    x, y = _both(self, other)
    x, y = _floating(x), _floating(y)
    zero_x = x == 0
    # torch's gradient to self is log(other) even where self is 0, except 0 where other <= 0
    safe_y = where(zero_x & (y <= 0), _constant(1.0, y), y)
    log_y = safe_y.log()
    out = where(zero_x, _constant(0.0, x), x * log_y)
    finite_log = where(zero_x & log_y.isfinite(), log_y, _constant(0.0, x)).detach()  # (0 * inf would be NaN)
    at_zero = where(zero_x, x, _constant(0.0, x))  # (inf - inf would be NaN elsewhere)
    out = out + (at_zero - at_zero.detach()) * finite_log
    return where(y.isnan(), y, out)


def _sin_ratio(u: Tensor, scale_squared: float) -> Tensor:
    """sin(s r) / (s r) for u = r ** 2 and s ** 2 = scale_squared, by its Taylor series in u,
    for s |r| up to about pi / 2 (s^2 u <= 2.5): terms to (s^2 u)^6 / 13! in float32 (the
    next below 7e-10 of the value there), to (s^2 u)^10 / 21! in float64 (the next 1.3e-18).
    A polynomial, not the device's sin: Vulkan and WGSL let sin be off by ~2^-11 absolute."""
    terms = 11 if u.dtype is float64 else 7
    return _horner([(-scale_squared) ** k / math.factorial(2 * k + 1) for k in range(terms)], u)


def _parity_sign(n: Tensor) -> Tensor:
    """(-1) ** n for an integral float n: 1 - 2 (n mod 2), exact for every n."""
    return 1.0 - (n - (n * 0.5).floor() * 2.0) * 2.0


def _sin_over(a: Tensor, n: Tensor, r: Tensor, scale_squared: float) -> Tensor:
    """sin(s a) / (s a) for a >= 0 reduced as s a = n pi + s r (n integral, |s r| <= pi / 2):
    (-1)^n (r / a) S(r^2), S = _sin_ratio; S(a^2) itself where n is 0 (r is a there: no
    division, so 1 at 0 and at subnormals). NaN where a is inf or NaN."""
    central = n == 0
    one = _constant(1.0, a)
    ratio = r / where(central, one, a)
    return where(central, one, ratio * _parity_sign(n)) * _sin_ratio(r.square(), scale_squared)


@_method
@_half_in_float32
def sinc(self):
    """sin(pi x) / (pi x), 1 at 0. sinc is even: a = |x| is reduced exactly, n = round(a),
    r = a - n in [-1/2, 1/2] (exact in any float), and sin(pi a) = (-1)^n sin(pi r) by a
    polynomial (_sin_over), not the device's sin of pi x (on the H200 that gave 0.99978 where
    sinc is 1 - 1e-7, and 0 at 1e-30). Within a few ulps everywhere; exactly 0 at the integers, where torch's
    float32 sin(pi x) / (pi x) gives +-2.8e-8 (pi rounded to float32). The gradient is this
    form's (through the polynomial: as accurate; 0 at 0)."""
    a = _floating(self).abs()
    n = a.round().detach()
    return _sin_over(a, n, a - n, math.pi ** 2)


# ------------------------------------------------------------------ inverse hyperbolic
@_method
@_half_in_float32
def asinh(self):
    """sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))); log(2|x|) beyond 1e8, where x^2 would
    overflow; -0 stays -0."""
    x = _floating(self)
    size = x.abs()
    big = size > 1e8
    safe = where(big, _constant(1.0, x), size)
    small_form = (safe + safe * safe / ((safe * safe + 1.0).sqrt() + 1.0)).log1p()
    big_form = where(big, size, _constant(1.0, x)).log() + _LN2
    magnitude = where(big, big_form, small_form)
    return where(x < 0, -magnitude, where(x == 0, x, magnitude))


@_method
@_half_in_float32
def acosh(self):
    """log1p((x - 1) + sqrt((x - 1)(x + 1))) (accurate near 1); log(2x) beyond 1e8; NaN below 1."""
    x = _floating(self)
    big = x > 1e8
    safe = where(big, _constant(2.0, x), x)
    shifted = safe - 1.0
    small_form = (shifted + (shifted * (safe + 1.0)).sqrt()).log1p()
    big_form = where(big, x, _constant(2.0, x)).log() + _LN2
    return where(x < 1, _constant(math.nan, x), where(big, big_form, small_form))


@_method
@_half_in_float32
def atanh(self):
    """0.5 log1p(2x / (1 - x)): +-inf at +-1, NaN beyond."""
    x = _floating(self)
    return (x * 2.0 / (1.0 - x)).log1p() * 0.5


# ------------------------------------------------------------------ special functions
# Numerical Recipes' erfcc (Chebyshev fit): relative error below 1.2e-7 for every x.
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587,
         -0.82215223, 0.17087277)


def _horner(coefficients, t: Tensor) -> Tensor:
    """coefficients[0] + coefficients[1] t + ... (lowest power first)."""
    out = full(t.shape, coefficients[-1], dtype=t.dtype)
    for c in reversed(coefficients[:-1]):
        out = out * t + c
    return out


def _erfc_values(x: Tensor) -> Tensor:
    size = x.abs()
    t = 1.0 / (size * 0.5 + 1.0)
    tail = t * (-size * size + _horner(_ERFC, t)).exp()
    return where(x < 0, 2.0 - tail, tail)


class _Erfc(Function):
    """erfc with torch's gradient -2 / sqrt(pi) exp(-x^2) (not the fit's derivative)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _in_float32(_erfc_values, x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * ((-x * x).exp() * (-2.0 / math.sqrt(math.pi)))


@_method
def erfc(self):
    """1 - erf(x) without the cancellation (relative error about 1e-7, float64 included)."""
    return _Erfc.apply(_floating(self))


# Abramowitz and Stegun 9.8.1-9.8.4: I0 and I1 for |x| <= 3.75 in t = (x / 3.75)^2, beyond in
# 3.75 / |x| times exp(|x|) / sqrt(|x|); relative errors below 2.2e-7.
_I0_SMALL = (1.0, 3.5156229, 3.0899424, 1.2067492, 0.2659732, 0.0360768, 0.0045813)
_I0_LARGE = (0.39894228, 0.01328592, 0.00225319, -0.00157565, 0.00916281, -0.02057706, 0.02635537,
             -0.01647633, 0.00392377)
_I1_SMALL = (0.5, 0.87890594, 0.51498869, 0.15084934, 0.02658733, 0.00301532, 0.00032411)
_I1_LARGE = (0.39894228, -0.03988024, -0.00362018, 0.00163801, -0.01031555, 0.02282967, -0.02895312,
             0.01787654, -0.00420059)


def _bessel(x: Tensor, small_coefficients, large_coefficients, odd: bool, scaled: bool = False) -> Tensor:
    """I0 or I1 (odd) by the Abramowitz-Stegun polynomials; scaled: exp(-|x|) times it (i0e,
    i1e: the large form P(3.75 / |x|) / sqrt(|x|) has no exponential at all). Unscaled, the
    large form's exp(|x|) is applied in two halves: exp(|x|) alone overflows float32 at 88.7
    where I0 and I1 are finite up to about 91.9 (at +-inf 0 * inf: NaN, as torch's)."""
    size = x.abs()
    small = size <= 3.75
    near = where(small, size, _constant(3.75, x))
    far = where(small, _constant(3.75, x), size)
    small_form = _horner(small_coefficients, (near / 3.75).square())
    large_form = _horner(large_coefficients, 3.75 / far) / far.sqrt()
    if scaled:
        small_form = small_form * (-near).exp()
    else:
        half = (far * 0.5).exp()
        large_form = large_form * half * half
    if odd:  # I1(x) = x * (series) near 0, odd in x
        return where(small, small_form * x, where(x < 0, -large_form, large_form))
    return where(small, small_form, large_form)


class _I0(Function):
    """i0 with torch's gradient i1(x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _in_float32(lambda v: _bessel(v, _I0_SMALL, _I0_LARGE, odd=False), x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * _in_float32(lambda v: _bessel(v, _I1_SMALL, _I1_LARGE, odd=True), x)


@_method
def i0(self):
    """The modified Bessel function of the first kind, order 0 (relative error about 2e-7)."""
    return _I0.apply(_floating(self))


# ------------------------------------------------------------------ signs and parts
def _negative_sign(x: Tensor) -> Tensor:
    """Where x's sign bit is set, for a float x: x < 0 or x is -0 (1 / -0 = -inf). A NaN counts
    as positive (its sign bit cannot be read through the comparisons)."""
    return (x < 0) | ((x == 0) & (1.0 / x < 0))


@_method
def signbit(self):
    """Whether the sign bit is set: negative numbers, -0, -inf and NaNs with the sign bit (as
    torch), read from the bits (ops' unary "signbit"; not differentiable)."""
    if not self.dtype.is_floating_point:
        return self < 0
    buf, = _float_operands(self)
    return Tensor(gpu().unary("signbit", buf), self.shape) != 0


@_method
@_half_in_float32
def copysign(self, other):
    """|self| with other's sign (-0 counts as negative); the gradient to other is 0, as torch."""
    x, y = _both(self, other)
    x = _floating(x)
    if not y.dtype.is_floating_point:
        y = _cast(y, x.dtype)
    size = x.abs()
    out = where(_negative_sign(y), -size, size)
    if y.requires_grad:  # torch gives other a zero gradient rather than none
        out = where(zeros(out.shape, dtype=bool_), y, out)
    return out


@_method
def sgn(self):
    """sign(x) for real tensors (torch.sgn extends it to complex); bool stays bool."""
    if self.dtype is bool_:
        return self.clone()
    return self.sign()


@_method
def positive(self):
    """self itself (torch.positive); bool refused, as torch."""
    if self.dtype is bool_:
        raise TypeError("positive: not supported for bool tensors")
    return self


@_method
def fix(self):
    return self.trunc()


@_method
def frexp(self):
    """(mantissa, exponent) with self = mantissa * 2 ** exponent, |mantissa| in [0.5, 1) and an
    int32 exponent; 0, inf and NaN give themselves and exponent 0, as torch. Read from the
    bits (ops' unary "frexp_mantissa" / "frexp_exponent"; numpy's frexp for float64), so
    subnormals come out right where a GPU flushes them to 0 in arithmetic (the H200 did);
    not differentiable."""
    if not self.dtype.is_floating_point:
        raise TypeError(f"frexp: only float tensors are supported, got {self.dtype}")
    buf, = _float_operands(self.detach())
    mantissa = Tensor(gpu().unary("frexp_mantissa", buf), self.shape)
    exponent = Tensor(gpu().unary("frexp_exponent", buf), self.shape)
    return FrexpResult(mantissa, _cast(exponent, int32))


# ------------------------------------------------------------------ NaN and infinity
@_method
def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf, -inf -> neginf (defaults: 0 and the dtype's largest and
    lowest finite values, as torch); integer and bool tensors are copied."""
    if not self.dtype.is_floating_point:
        return self.clone()
    info = dtypes.finfo(self.dtype)
    high = _constant(info.max if posinf is None else posinf, self)
    low = _constant(info.min if neginf is None else neginf, self)
    out = where(self == math.inf, high, where(self == -math.inf, low, self))
    return where(self.isnan(), _constant(0.0 if nan is None else nan, self), out)


@_method
def isposinf(self):
    if not self.dtype.is_floating_point:
        return zeros(self.shape, dtype=bool_)
    return self == math.inf


@_method
def isneginf(self):
    if not self.dtype.is_floating_point:
        return zeros(self.shape, dtype=bool_)
    return self == -math.inf


@_method
def isreal(self):
    """True everywhere: anygpu has no complex dtypes."""
    return full(self.shape, True, dtype=bool_)


@_method
def is_complex(self) -> bool:
    return False


@_method
def is_nonzero(self) -> bool:
    """Whether a one-element tensor is nonzero (RuntimeError for more or fewer elements, as torch)."""
    if self.numel() == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if self.numel() > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(self.item())


# ------------------------------------------------------------------ integers
def _check_integer(op: str, a: Tensor, b: Tensor) -> None:
    for t in (a, b):
        if not _is_int(t.dtype):
            raise ValueError(f"{op}: only integer tensors are supported, got {t.dtype}")


@_method
def gcd(self, other):
    """The greatest common divisor (nonnegative; gcd(0, 0) = 0), by Euclid's steps on the
    whole tensor until every remainder is 0."""
    a, b = _both(self, other)
    _check_integer("gcd", a, b)
    dtype = _result_dtype(a, b)
    a, b = a.abs(), b.abs()
    shape = (a + b).shape
    a, b = a.expand(shape), b.expand(shape)
    while bool((b != 0).any()):
        live = b != 0
        remainder = a % where(live, b, 1)
        a, b = where(live, b, a), where(live, remainder, 0)
    return _cast(a, dtype) if a.dtype is not dtype else a.clone()


@_method
def lcm(self, other):
    """The least common multiple (nonnegative; 0 when either is 0)."""
    a, b = _both(self, other)
    _check_integer("lcm", a, b)
    divisor = gcd(a, b)
    return (a // where(divisor == 0, 1, divisor) * b).abs()


# ------------------------------------------------------------------ aliases and wrappers
@_method
def clamp_min(self, min):
    return self.clamp(min=min)


@_method
def clamp_max(self, max):
    return self.clamp(max=max)


@_method
def divide(self, other, *, rounding_mode=None):
    """self / other; rounding_mode 'trunc' rounds toward zero, 'floor' down (integers stay integers)."""
    if rounding_mode is None:
        return self / other
    if rounding_mode == "floor":
        return self // other
    if rounding_mode == "trunc":
        if _result_dtype(self, other).is_floating_point:
            return (self / other).trunc()
        return (self - self.fmod(other)) // other  # exact: the dividend is a multiple of other
    raise ValueError(f"divide: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")


@_method
def subtract(self, other, *, alpha=1):
    return self - (other if alpha == 1 else other * alpha)


@_method
def multiply(self, other):
    return self * other


@_method
def heaviside(self, values):
    from ..functions import heaviside as function
    return function(self, values)


@_method
def fmax(self, other):
    from ..functions import fmax as function
    return function(self, other)


@_method
def fmin(self, other):
    from ..functions import fmin as function
    return function(self, other)


@_method
def isclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    from ..functions import isclose as function
    return function(self, other, rtol, atol, equal_nan)


@_method
def allclose(self, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    from ..functions import allclose as function
    return function(self, other, rtol, atol, equal_nan)


def _bitwise(op: str):
    def method(self, other):
        return getattr(self, op)(other)
    return method


METHODS.update({
    "absolute": Tensor.abs, "negative": Tensor.neg, "arccos": Tensor.acos, "arcsin": Tensor.asin,
    "arccosh": acosh, "arcsinh": asinh, "arctanh": atanh,
    "greater": Tensor.gt, "greater_equal": Tensor.ge, "less": Tensor.lt, "less_equal": Tensor.le,
    "not_equal": Tensor.ne,
    "bitwise_and": _bitwise("__and__"), "bitwise_or": _bitwise("__or__"), "bitwise_xor": _bitwise("__xor__"),
    "bitwise_not": Tensor.__invert__,
})


# ------------------------------------------------------------------ in-place forms
def _in_place(name: str):
    """Tensor.<name>_: self takes the value of self.<name>(...) (see inplace._inplace)."""
    def method(self, *args, **kwargs):
        return _inplace(self, getattr(self, name)(*args, **kwargs), name + "_")
    method.__name__ = method.__qualname__ = name + "_"
    method.__doc__ = f"In place: self takes the value of self.{name}(...) in its own dtype."
    return method


def _float_power_(self, exponent):
    if self.dtype is not float64:
        raise ValueError(f"float_power_: the result is float64, which cannot be written into a tensor of "
                         f"dtype {self.dtype}")
    return _inplace(self, float_power(self, exponent), "float_power_")


_IN_PLACE = (
    "acos", "asin", "atan", "arccos", "arcsin", "arctan", "acosh", "asinh", "atanh", "arccosh", "arcsinh",
    "arctanh", "atan2", "arctan2", "ceil", "floor", "round", "trunc", "fix", "frac", "cos", "cosh", "sin", "sinh",
    "tan", "erf", "erfc", "erfinv", "expm1", "exp2", "lgamma", "digamma", "log10", "log1p", "log2", "logit",
    "reciprocal", "rsqrt", "sign", "sgn", "square", "i0", "sinc", "deg2rad", "rad2deg", "eq", "ne", "lt", "le",
    "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal", "logical_and", "logical_or",
    "logical_xor", "logical_not", "remainder", "floor_divide", "fmod", "hypot", "clamp_min", "clamp_max",
    "copysign", "nan_to_num", "xlogy", "ldexp", "heaviside", "gcd", "lcm", "addcmul", "addcdiv", "absolute",
    "negative", "multiply", "subtract", "divide", "true_divide", "bitwise_and", "bitwise_or", "bitwise_xor",
    "bitwise_not",
)
for _name in _IN_PLACE:
    if not hasattr(Tensor, _name + "_"):
        METHODS[_name + "_"] = _in_place(_name)
METHODS["float_power_"] = _float_power_


# ------------------------------------------------------------------ torch.<name>
_WITH_OUT = (
    "addcmul", "addcdiv", "deg2rad", "rad2deg", "exp2", "ldexp", "float_power", "logaddexp", "logaddexp2",
    "xlogy", "sinc", "asinh", "acosh", "atanh", "arcsinh", "arccosh", "arctanh", "arccos", "arcsin", "erfc", "i0",
    "signbit", "copysign", "sgn", "fix", "frexp", "nan_to_num", "isposinf", "isneginf", "gcd", "lcm",
    "clamp_min", "clamp_max", "fmod", "greater", "greater_equal", "less", "less_equal", "not_equal",
)
_WITHOUT_OUT = ("positive", "isreal", "is_complex", "is_nonzero", "rsub")
FUNCTIONS.update({name: method_function(name) for name in _WITH_OUT})
FUNCTIONS.update({name: method_function(name, out=False) for name in _WITHOUT_OUT})
# torch's module-level in-place functions (torch.sin_(x), ...)
for _name in ("abs_", "acos_", "acosh_", "arccos_", "arccosh_", "arcsin_", "arcsinh_", "arctan_", "arctanh_",
              "asin_", "asinh_", "atan_", "atanh_", "ceil_", "clamp_", "clamp_max_", "clamp_min_", "clip_", "cos_",
              "cosh_", "deg2rad_", "erf_", "erfc_", "exp2_", "exp_", "expm1_", "fix_", "floor_", "frac_", "gcd_",
              "i0_", "lcm_", "ldexp_", "log10_", "log1p_", "log2_", "log_", "logit_", "nan_to_num_", "neg_",
              "negative_", "rad2deg_", "reciprocal_", "relu_", "round_", "rsqrt_", "sigmoid_", "sin_", "sinc_",
              "sinh_", "sqrt_", "square_", "tan_", "tanh_", "trunc_", "xlogy_"):
    FUNCTIONS[_name] = method_function(_name, out=False)
