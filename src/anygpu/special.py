"""torch.special: the special functions under torch's names, composed from anygpu's
elementwise Tensor ops (so dtypes, float16 computed in float32, float64 on the host and the
NaN rules come with them).

Where a function is an existing op under another name (expit = sigmoid, gammaln = lgamma,
psi = digamma, multigammaln = mvlgamma, ...) it is that op, with `out=` as torch. The new
ones (erfcx, i0e, i1, i1e, ndtr, ndtri, log_ndtr, xlog1py, entr, spherical_bessel_j0) are
written here; erfcx, i0e, i1, i1e, ndtri and log_ndtr carry torch's gradient formulas rather
than the derivative of their fits.

Accuracy: the fits are single-precision ones (Numerical Recipes' erfc, Abramowitz-Stegun's
Bessel polynomials, Giles' erfinv), so float64 results carry their error too (about 1e-7
relative, 2e-7 for the Bessel functions), not float64's. Each function's docstring gives its
bound where it is looser than float32 rounding.

Not here: polygamma (anygpu has digamma only, order 0), zeta, gammainc/gammaincc, the
Bessel J/Y/K and Airy functions and the orthogonal polynomials.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

from .dtypes import float64
from .tensor import Tensor, where
from .tensor.compat_math import (
    _ERFC, _I0_LARGE, _I0_SMALL, _I1_LARGE, _I1_SMALL, _both, _bessel, _constant, _floating, _horner,
    _in_float32, _sin_over,
)
from .tensor.elementwise import _to_tensor
from .tensor.function import Function
from .tensor.outputs import with_out
from .tensor.special import _ERFINV_CENTRAL, _ERFINV_TAIL

__all__ = [
    "digamma", "entr", "erf", "erfc", "erfcx", "erfinv", "exp2", "expit", "expm1", "gammaln", "i0", "i0e",
    "i1", "i1e", "log1p", "log_ndtr", "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr", "ndtri",
    "psi", "round", "sinc", "softmax", "spherical_bessel_j0", "xlog1py", "xlogy",
]

_SQRT_HALF = math.sqrt(0.5)
_LOG_HALF = math.log(0.5)
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)


def _as_float(input) -> Tensor:
    """input as a float tensor (integers and bools in the default float dtype, as torch)."""
    return _floating(input if isinstance(input, Tensor) else _to_tensor(input))


def _method(name: str, doc: str):
    """torch.special.<name>(input, *, out=None) as input.<name>()."""
    def fn(input):
        return getattr(_as_float(input), name)()
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return with_out(name, fn)


# ------------------------------------------------------------------ existing ops under torch.special's names
expit = _method("sigmoid", "expit(input, *, out=None): the logistic sigmoid 1 / (1 + exp(-x)).")
expit.__name__ = "expit"
erf = _method("erf", "erf(input, *, out=None): the error function.")
erfc = _method("erfc", "erfc(input, *, out=None): 1 - erf(x) without cancellation (Numerical Recipes' "
               "erfcc: relative error about 1.2e-7, in float64 too).")
erfinv = _method("erfinv", "erfinv(input, *, out=None): the inverse of erf on [-1, 1] (Giles' single-precision "
                 "polynomials; relative error a few 1e-7, in float64 too).")
gammaln = _method("lgamma", "gammaln(input, *, out=None): log |Gamma(x)| (Lanczos; within 3e-6 of max(|y|, 1)).")
gammaln.__name__ = "gammaln"
digamma = _method("digamma", "digamma(input, *, out=None): Gamma'(x) / Gamma(x).")
psi = _method("digamma", "psi(input, *, out=None): digamma.")
psi.__name__ = "psi"
i0 = _method("i0", "i0(input, *, out=None): the modified Bessel function I0 (relative error about 2e-7).")
sinc = _method("sinc", "sinc(input, *, out=None): sin(pi x) / (pi x), 1 at 0.")
log1p = _method("log1p", "log1p(input, *, out=None): log(1 + x).")
expm1 = _method("expm1", "expm1(input, *, out=None): exp(x) - 1.")
exp2 = _method("exp2", "exp2(input, *, out=None): 2 ** x.")


def logit(input, eps=None):
    """log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given."""
    return _as_float(input).logit(eps)


logit = with_out("logit", logit)


def _round(input, decimals: int = 0):
    """round half to even, at `decimals` decimal places (x * 10^d rounded, divided back)."""
    return _to_tensor(input).round(decimals=decimals)


_round.__name__ = _round.__qualname__ = "round"
round = with_out("round", _round)  # noqa: A001  (torch.special.round)


def _multigammaln(input, p: int):
    """The multivariate log-gamma of dimension p (torch.special.multigammaln = torch.mvlgamma)."""
    return _to_tensor(input).mvlgamma(p)


_multigammaln.__name__ = _multigammaln.__qualname__ = "multigammaln"
multigammaln = with_out("multigammaln", _multigammaln)


def xlogy(input, other):
    """input * log(other), 0 where input is 0, NaN where other is NaN."""
    x, y = _both(input, other)
    return x.xlogy(y)


xlogy = with_out("xlogy", xlogy)


def softmax(input, dim, dtype=None):
    """exp(x) / sum(exp(x)) along dim, the input cast to dtype first when given."""
    x = _to_tensor(input)
    return (x if dtype is None else x.to(dtype)).softmax(dim)


def log_softmax(input, dim, dtype=None):
    """x - logsumexp(x) along dim, the input cast to dtype first when given."""
    x = _to_tensor(input)
    return (x if dtype is None else x.to(dtype)).log_softmax(dim)


def _logsumexp(input, dim, keepdim: bool = False):
    """log(sum(exp(x))) over dim (an int or a tuple of them), around the max."""
    x = _to_tensor(input)
    if not isinstance(dim, (tuple, list)):
        return x.logsumexp(dim, keepdim)
    if x.ndim == 0:
        return x.logsumexp(0, keepdim)
    reduced = sorted({d % x.ndim for d in dim})
    kept = [d for d in range(x.ndim) if d not in reduced]
    # the reduced dims moved last and flattened into one: a single-dim logsumexp
    flat = x.permute(*kept, *reduced).reshape(*[x.shape[d] for d in kept], -1).logsumexp(-1)
    if keepdim:
        return flat.reshape(*[1 if d in reduced else x.shape[d] for d in range(x.ndim)])
    return flat


_logsumexp.__name__ = _logsumexp.__qualname__ = "logsumexp"
logsumexp = with_out("logsumexp", _logsumexp)


# ------------------------------------------------------------------ the error function's relatives
def _erfcx_values(x: Tensor) -> Tensor:
    """exp(x^2) erfc(x). Numerical Recipes' erfcc is t exp(-x^2 + P(t)) for x >= 0, t = 1 / (1 + x/2),
    so the scaled form t exp(P(t)) has no exp(-x^2) to underflow (0 at +inf, 1 / (x sqrt(pi)) beyond
    1e4 as it should); below 0, 2 exp(x^2) - erfcx(-x) (inf below about -9.3 in float32, as torch)."""
    size = x.abs()
    t = 1.0 / (size * 0.5 + 1.0)
    scaled = t * _horner(_ERFC, t).exp()
    negative = x < 0
    growth = where(negative, x, _constant(0.0, x)).square().exp()  # (0 where unused: no overflow to carry)
    return where(negative, growth * 2.0 - scaled, scaled)


def _exp_half_square(x: Tensor, sign: float) -> Tensor:
    """exp(sign * x^2 / 2) without float32's rounding of x^2 (a relative error x^2 * 6e-8 on its
    own): x = head + rest with head on a grid of 1/256, so head^2 (12 significant bits squared)
    is exact and rest (2 head + rest) small."""
    head = (x * 256.0).round() * (1.0 / 256.0)
    rest = x - head
    return (head * head * (-0.5 * sign)).exp() * (rest * (head * 2.0 + rest) * (-0.5 * sign)).exp()


class _Erfcx(Function):
    """erfcx with torch's gradient 2 x erfcx(x) - 2 / sqrt(pi)."""

    @staticmethod
    def forward(ctx, x):
        y = _in_float32(_erfcx_values, x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * (x * y * 2.0 - 2.0 * _INV_SQRT_PI)


def erfcx(input):
    """The scaled complementary error function exp(x^2) erfc(x), stable for large x (no
    underflow: about 1 / (x sqrt(pi)) up to +inf, where it is 0). Relative error about 2e-7
    for x >= 0 (Numerical Recipes' erfcc fit, float64 too); below 0 it is 2 exp(x^2) - erfcx(-x),
    relative error about 2e-7 (1 + x^2) in float32 (the exponential of a large argument), and
    inf below about -9.3 (float32), as torch's."""
    return _Erfcx.apply(_as_float(input))


erfcx = with_out("erfcx", erfcx)


def _ndtr_values(x: Tensor) -> Tensor:
    # 0.5 erfc(|x| / sqrt(2)) = 0.5 erfcx(|x| / sqrt(2)) exp(-x^2 / 2), the square split so the
    # tail keeps float32's precision (erfc(x / sqrt(2)) would carry the rounding of x / sqrt(2)
    # times x^2); 1 minus that for x > 0
    tail = _erfcx_values(x.abs() * _SQRT_HALF) * _exp_half_square(where(x.isinf(), _constant(0.0, x), x), 1.0) * 0.5
    tail = where(x.isinf(), _constant(0.0, x), tail)
    return where(x > 0, 1.0 - tail, tail)


class _Ndtr(Function):
    """ndtr with torch's gradient exp(-x^2 / 2) / sqrt(2 pi)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _in_float32(_ndtr_values, x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x * x * -0.5).exp() * (1.0 / math.sqrt(2.0 * math.pi))


def ndtr(input):
    """The standard normal CDF, accurate in both tails (relative error about 8e-7 (1 + x^2 / 20)
    in float32, the exponential of -x^2 / 2 dominating far left, 2e-7 in float64; torch's 1 + erf form gives 0 below about -5.5 in float32 and -8.3 in float64, this one
    follows the tail until float32 flushes it to 0 near -13)."""
    return _Ndtr.apply(_as_float(input))


ndtr = with_out("ndtr", ndtr)


def _log_ndtr_values(x: Tensor) -> Tensor:
    # x < 0: log(erfc(z) / 2) = log(1/2) + log(erfcx(z)) - z^2, z = -x / sqrt(2), with log(erfcx(z))
    # = log(t) + P(t) from the erfcc fit: no underflow however far left
    z = where(x < 0, x, _constant(0.0, x)) * -_SQRT_HALF
    t = 1.0 / (z * 0.5 + 1.0)
    left = t.log() + _horner(_ERFC, t) - z * z + _LOG_HALF
    # x >= 0: log(1 - erfc(x / sqrt(2)) / 2) by log1p, the small erfc kept accurate
    right = (-_ndtr_values(-where(x < 0, _constant(0.0, x), x))).log1p()
    return where(x < 0, left, right)


class _LogNdtr(Function):
    """log_ndtr with torch's gradient exp(-(log_ndtr(x) + x^2 / 2)) / sqrt(2 pi)."""

    @staticmethod
    def forward(ctx, x):
        y = _in_float32(_log_ndtr_values, x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * (-(y + x * x * 0.5)).exp() * (1.0 / math.sqrt(2.0 * math.pi))


def log_ndtr(input):
    """log of the standard normal CDF, finite however far left (about -x^2 / 2 - log(-x sqrt(2 pi)));
    relative error about 2e-7 left of 0, 8e-7 (1 + x^2 / 20) right of it in float32 (ndtr's tail),
    0 at +inf, -inf at -inf."""
    return _LogNdtr.apply(_as_float(input))


log_ndtr = with_out("log_ndtr", log_ndtr)


def _ndtri_values(p: Tensor) -> Tensor:
    # sqrt(2) erfinv(2p - 1) by Giles' polynomials in w = -log(1 - y^2), y = 2p - 1: 1 - y^2 =
    # 4 p (1 - p) is computed from p itself, so the left tail keeps p's precision (2p - 1 would
    # round to -1 below p = 3e-8 in float32)
    y = p * 2.0 - 1.0
    w = -(p * (1.0 - p) * 4.0).log()
    central = _horner(_ERFINV_CENTRAL[::-1], w - 2.5)
    tail = _horner(_ERFINV_TAIL[::-1], where(w < 5, _constant(5.0, p), w).sqrt() - 3.0)
    giles = where(w < 5, central, tail) * y * math.sqrt(2.0)
    # Giles' tail is fitted up to w = 16 (float32's last value below 1); further out (p below
    # about 3e-8 or above 1 - 3e-8), Newton's method on log_ndtr(x) = log(q), q = min(p, 1 - p),
    # from x^2 + 2 log(-x) = -2 log(q) - log(2 pi) solved once by x^2 = u - log(u)
    far = w > _NDTRI_NEWTON_W
    upper = p > 0.5
    log_q = where(upper, (-where(far, p, _constant(0.5, p))).log1p(), where(far, p, _constant(0.5, p)).log())
    u = log_q * -2.0 - math.log(2.0 * math.pi)
    x = -(u - u.log()).sqrt()
    for _ in range(4):  # the residual is about 0.3 / u after the first guess, quadratic from there
        log_cdf = _log_ndtr_values(x)
        x = x - (log_cdf - log_q) * (log_cdf + x * x * 0.5).exp() * math.sqrt(2.0 * math.pi)
    out = where(far, where(upper, -x, x), giles)
    out = where(p == 0, _constant(-math.inf, p), where(p == 1, _constant(math.inf, p), out))
    return where((p < 0) | (p > 1), _constant(math.nan, p), out)


_NDTRI_NEWTON_W = 16.0


class _Ndtri(Function):
    """ndtri with torch's gradient sqrt(2 pi) exp(ndtri(p)^2 / 2)."""

    @staticmethod
    def forward(ctx, p):
        y = _in_float32(_ndtri_values, p)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (y * y * 0.5).exp() * math.sqrt(2.0 * math.pi)


def ndtri(input):
    """The inverse of ndtr on [0, 1] (-inf at 0, inf at 1, NaN outside): Giles' erfinv
    polynomials applied to 4 p (1 - p), so small p keep their precision. Relative error a few
    1e-7 (float64 too), beyond p's own resolution near 1."""
    return _Ndtri.apply(_as_float(input))


ndtri = with_out("ndtri", ndtri)


# ------------------------------------------------------------------ modified Bessel functions
def _i0e_values(x: Tensor) -> Tensor:
    return _bessel(x, _I0_SMALL, _I0_LARGE, odd=False, scaled=True)


def _i1e_values(x: Tensor) -> Tensor:
    return _bessel(x, _I1_SMALL, _I1_LARGE, odd=True, scaled=True)


def _i1_values(x: Tensor) -> Tensor:
    return _bessel(x, _I1_SMALL, _I1_LARGE, odd=True)


def _i0_values(x: Tensor) -> Tensor:
    return _bessel(x, _I0_SMALL, _I0_LARGE, odd=False)


class _I0e(Function):
    """i0e with torch's gradient i1e(x) - sign(x) i0e(x)."""

    @staticmethod
    def forward(ctx, x):
        y = _in_float32(_i0e_values, x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * (_in_float32(_i1e_values, x) - x.sign() * y)


def _at_zero(x: Tensor, value: float, elsewhere: Tensor) -> Tensor:
    return where(x == 0, _constant(value, x), elsewhere)


class _I1(Function):
    """i1 with torch's gradient i0(x) - i1(x) / x (1/2 at 0)."""

    @staticmethod
    def forward(ctx, x):
        y = _in_float32(_i1_values, x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        safe = where(x == 0, _constant(1.0, x), x)
        return grad * _at_zero(x, 0.5, _in_float32(_i0_values, x) - y / safe)


class _I1e(Function):
    """i1e with torch's gradient i0e(x) - i1e(x) (sign(x) + 1 / x) (1/2 at 0)."""

    @staticmethod
    def forward(ctx, x):
        y = _in_float32(_i1e_values, x)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        safe = where(x == 0, _constant(1.0, x), x)
        return grad * _at_zero(x, 0.5, _in_float32(_i0e_values, x) - y * (x.sign() + 1.0 / safe))


def i0e(input):
    """exp(-|x|) I0(x), finite for every x (0 at +-inf); Abramowitz-Stegun 9.8.1-9.8.2, relative
    error about 2.2e-7 (float64 too)."""
    return _I0e.apply(_as_float(input))


def i1(input):
    """The modified Bessel function I1 (odd); Abramowitz-Stegun 9.8.3-9.8.4, relative error about
    2.2e-7 (float64 too) plus |x| 8e-8 in float32 (the exponential); +-inf beyond about +-91.9
    (float32), NaN at +-inf as torch's."""
    return _I1.apply(_as_float(input))


def i1e(input):
    """exp(-|x|) I1(x), finite for every x (+-0 at +-inf); Abramowitz-Stegun, relative error
    about 2.2e-7 (float64 too)."""
    return _I1e.apply(_as_float(input))


i0e = with_out("i0e", i0e)
i1 = with_out("i1", i1)
i1e = with_out("i1e", i1e)


# ------------------------------------------------------------------ x log terms
def xlog1py(input, other):
    """input * log1p(other), 0 where input is 0 (also for other = -1), NaN where other is NaN;
    gradients as torch's (log1p(other) to input, except 0 where input is 0 and other <= -1;
    input / (1 + other) to other)."""
    x, y = _both(input, other)
    x, y = _floating(x), _floating(y)
    zero_x = x == 0
    safe_y = where(zero_x & (y <= -1), _constant(0.0, y), y)
    log_y = safe_y.log1p()
    out = where(zero_x, _constant(0.0, x), x * log_y)
    # where x is 0 the product's gradient to x is cut by where(); torch's is log1p(other) there
    finite_log = where(zero_x & log_y.isfinite(), log_y, _constant(0.0, x)).detach()
    at_zero = where(zero_x, x, _constant(0.0, x))
    out = out + (at_zero - at_zero.detach()) * finite_log
    return where(y.isnan(), y, out)


xlog1py = with_out("xlog1py", xlog1py)


def entr(input):
    """-x log(x) for x > 0, 0 at 0, -inf below 0, NaN kept; gradient -(1 + log x) for x > 0."""
    x = _as_float(input)
    positive = x > 0
    safe = where(positive, x, _constant(1.0, x))
    near_one = (safe - 1.0).abs() < 0.5  # log1p(x - 1), x - 1 exact there: relative accuracy near 1
    log = where(near_one, (safe - 1.0).log1p(), safe.log())
    out = where(positive, -safe * log, where(x == 0, _constant(0.0, x), _constant(-math.inf, x)))
    return where(x.isnan(), x, out)


entr = with_out("entr", entr)


def _cody_waite_pi(parts: int = 4, bits: int = 9) -> tuple:
    """pi as `parts` pieces of at most `bits` significant bits and a float32 rest (cut from 50
    digits of pi): n * piece is exact in float32 for n < 2 ** (24 - bits), so x - n pi
    taken piece by piece loses nothing to the multiple's rounding (Cody and Waite)."""
    pieces, rest = [], Fraction("3.14159265358979323846264338327950288419716939937510")
    for _ in range(parts):
        scale = Fraction(2) ** (bits - 1 - math.floor(math.log2(rest)))
        piece = Fraction(math.floor(rest * scale)) / scale
        pieces.append(float(piece))
        rest -= piece
    pieces.append(struct.unpack("<f", struct.pack("<f", float(rest)))[0])
    return tuple(pieces)


_PI_PIECES = _cody_waite_pi()
_REDUCED_BELOW = 1e5  # n = round(|x| / pi) < 2 ** 15 there: every n * piece exact


def _j0_float32(x: Tensor) -> Tensor:
    """sin(x) / x in float32 with the argument reduced exactly: n = round(|x| / pi), r = |x| -
    n pi by _PI_PIECES (|r| <= pi / 2, accurate to ~1e-13 absolute, so relative accuracy
    holds even near sin's zeros), then (-1)^n (r / |x|) S(r^2) (compat_math._sin_over). The
    device's sin of x itself lost 1.2e-5 relative at x = -41.14 on the H200 (Vulkan allows
    sin an absolute error that grows with |x|). Beyond |x| = 1e5 (|value| below 1e-5) the
    device's sin(x) / x, as accurate as its range reduction."""
    a = x.abs()
    n = (a * (1.0 / math.pi)).round().detach()
    r = a
    for piece in _PI_PIECES:
        r = r - n * piece
    near = _sin_over(a, n, r, 1.0)
    far = a >= _REDUCED_BELOW
    safe = where(far, x, _constant(_REDUCED_BELOW, x))
    return where(far, safe.sin() / safe, near)


def spherical_bessel_j0(input):
    """sin(x) / x, 1 at 0 (0 at +-inf). float32 (and float16, computed in float32) by an exact
    argument reduction and a polynomial (_j0_float32): within a few ulps for |x| < 1e5, the
    device's sin beyond; float64 by numpy's sin."""
    x = _as_float(input)
    if x.dtype is float64:
        zero = x == 0
        safe = where(zero, _constant(1.0, x), x)
        out = where(zero, _constant(1.0, x), safe.sin() / safe)
    else:
        out = _in_float32(_j0_float32, x)
    return where(x.isinf(), _constant(0.0, x), out)


spherical_bessel_j0 = with_out("spherical_bessel_j0", spherical_bessel_j0)
