"""Special functions without a kernel of their own: lgamma, digamma, erfinv."""

from __future__ import annotations

import math

from ..dtypes import float16, float32, float64
from .core import Tensor
from .creation import full
from .elementwise import _cast
from .function import Function
from .indexing import where

# M. Giles' single-precision erfinv: p(w - 2.5) for w = -log(1 - x^2) < 5, else q(sqrt(w) - 3); erfinv = p x
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)


_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


# Lanczos' coefficients for g = 7, n = 9 (Gamma(z + 1) = sqrt(2 pi) t^(z + 1/2) e^-t A(z), t = z + 7.5)
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
            1.5056327351493116e-7)


def _sin_cos_pi(r: Tensor) -> tuple[Tensor, Tensor]:
    """(sin(pi r), cos(pi r)) for |r| <= 1/2 by their Taylor series (to x^13 and x^12, under 1e-9
    there): relative accuracy down to r near 0 whatever a driver's sin and cos give (NVIDIA's
    are approximations good to an absolute 1e-6 or so, too coarse for the reflections' small
    sines near the poles)."""
    x = r * math.pi
    x2 = x * x
    sin = x * (1 - x2 / 6 * (1 - x2 / 20 * (1 - x2 / 42 * (1 - x2 / 72 * (1 - x2 / 110 * (1 - x2 / 156))))))
    cos = 1 - x2 / 2 * (1 - x2 / 12 * (1 - x2 / 30 * (1 - x2 / 56 * (1 - x2 / 90 * (1 - x2 / 132)))))
    return sin, cos


def _lgamma_values(x: Tensor) -> Tensor:
    small = x < 0.5
    z = where(small, 1 - x, x) - 1  # Lanczos at z + 1: x, or 1 - x for the reflection
    series = full(x.shape, _LANCZOS[0], dtype=x.dtype)
    for i, c in enumerate(_LANCZOS[1:], 1):
        series = series + c / (z + i)
    t = z + 7.5
    direct = 0.9189385332046727 + (z + 0.5) * t.log() - t + series.log()
    # |sin(pi x)| = |sin(pi r)| for r = x - round(x), exact in float32: near the poles pi * x itself
    # would carry an ulp of x into the small sine
    sine = _sin_cos_pi(where(small, x - x.round(), 0.5))[0]
    reflected = (math.pi / sine.abs()).log() - direct
    out = where(small, reflected, direct)
    out = where((x == 1) | (x == 2), 0.0, out)  # exact zeros there, as libm's (log 1! = log 0! = 0)
    return where(((x <= 0) & (x == x.floor())) | x.isinf(), math.inf, out)


def _digamma_values(x: Tensor) -> Tensor:
    negative = x < 0
    y = where(negative, 1 - x, x)
    shifted = 0.0
    for k in range(6):  # digamma(y) = digamma(y + 6) - sum 1 / (y + k); 1 / y keeps -0's sign (+inf there)
        shifted = shifted + (1 / y if k == 0 else 1 / (y + k))
    w = y + 6
    inv2 = 1 / (w * w)
    series = w.log() - 0.5 / w - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (1 / 240 - inv2 / 132))))
    psi = series - shifted
    sine, cosine = _sin_cos_pi(where(negative, x - x.round(), 0.5))  # tan has period pi
    out = where(negative, psi - math.pi * cosine / sine, psi)
    return where(negative & (x == x.floor()), math.nan, out)


class Lgamma(Function):
    """lgamma as an autograd.Function (its gradient digamma(x) exactly as torch's)."""

    @staticmethod
    def forward(ctx, x):
        wide = x if x.dtype is float32 or x.dtype is float64 else _cast(x, float32)  # (float64: kept)
        ctx.save_for_backward(wide)
        y = _lgamma_values(wide)
        return _cast(y, float16) if x.dtype is float16 else y

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * _digamma_values(x)


class Erfinv(Function):
    """erfinv as an autograd.Function."""

    @staticmethod
    def forward(ctx, x):
        y = _erfinv_values(x if x.dtype is float32 or x.dtype is float64 else _cast(x, float32))  # f16 in f32
        if x.dtype is float16:
            y = _cast(y, float16)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * ((y * y).exp() * (math.sqrt(math.pi) / 2))


def _erfinv_values(x: Tensor) -> Tensor:
    w = -((1 - x) * (1 + x)).log()

    def horner(coefficients, t):
        p = full(t.shape, coefficients[0], dtype=t.dtype)
        for c in coefficients[1:]:
            p = p * t + c
        return p
    central = horner(_ERFINV_CENTRAL, w - 2.5)
    tail = horner(_ERFINV_TAIL, where(w < 5, 5.0, w).sqrt() - 3)  # w < 5 takes the central form
    y = where(w < 5, central, tail) * x
    return where(x.abs() == 1, x * math.inf, y)  # the polynomials give no infinity at +-1
