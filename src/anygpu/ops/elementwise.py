"""Elementwise ops of the seed and their backward kernels (Layer 0).

Each op: check arguments, pick the kernel (one template, an expression per op), launch."""

from __future__ import annotations

import functools
import re

from ..runtime import load_shader
from ..runtime.device import WORKGROUPS_PER_DIM
from ._common import WORKGROUP_1D, check_buffer, check_same_len

# Expressions of `v` (input), `alpha`, `beta` (parameters).
UNARY = {
    "scale": "v * alpha",
    "add_scalar": "v + alpha",
    # NaN stays NaN, as in torch. WGSL lets compilers assume no NaN, so `v != v` may fold to
    # false; the bit test survives.
    "relu": "select(0.0, v, v > 0.0 || (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)",
    "sigmoid": "1.0 / (1.0 + exp(-v))",
    "swish": "v / (1.0 + exp(-v))",
    # tanh via exp of a clamped argument: WGSL's tanh may return NaN for large |v| on some drivers.
    "tanh_act": "select(tanh(clamp(v, -15.0, 15.0)), v, (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)",
    "neg": "-v",
    "exp": "exp(v)",
    "log": "log(v)",
    "sqrt": "sqrt(v)",
    "abs": "abs(v)",
    "square": "v * v",
    "reciprocal": "1.0 / v",
    "clamp": "clamp(v, alpha, beta)",
    "gelu": "0.5 * v * (1.0 + erf_approx(v * 0.70710678118))",
    "gelu_tanh": "0.5 * v * (1.0 + tanh(clamp(0.7978845608 * (v + 0.044715 * v * v * v), -15.0, 15.0)))",
    "sign": "sign(v)",
    "inside": "select(0.0, 1.0, v >= alpha && v <= beta)",
    "fill": "alpha",
    # Scalar operands of Tensor arithmetic (one launch instead of a fill plus a broadcast).
    "div_scalar": "v / alpha",
    "rsub_scalar": "alpha - v",
    "rdiv_scalar": "alpha / v",
    # v ** alpha with torch's real results for negative bases and integer exponents.
    "pow_scalar": "select(select(select(pow(abs(v), alpha), -pow(abs(v), alpha), abs(alpha - 2.0 * floor(alpha * 0.5)) == 1.0),"
                  " pow(v, alpha), v >= 0.0 || alpha != floor(alpha)), 1.0, alpha == 0.0)",
    "sin": "sin(v)",
    "cos": "cos(v)",
    "leaky_relu": "select(v * alpha, v, v > 0.0)",
    "elu": "select(alpha * (exp(min(v, 0.0)) - 1.0), v, v > 0.0)",
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
    "axpy": "a + alpha * b",
    "relu_backward": "select(0.0, a, b > 0.0)",          # a = grad, b = x
    "sigmoid_backward": "a * b * (1.0 - b)",              # b = y = sigmoid(x)
    "swish_backward": "a * (1.0 / (1.0 + exp(-b))) * (1.0 + b * (1.0 - 1.0 / (1.0 + exp(-b))))",  # b = x
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
    "maximum_share": "select(select(0.0, 0.5, a == b), 1.0, a > b)",
    "minimum_share": "select(select(0.0, 0.5, a == b), 1.0, a < b)",
}


# A helper function of a template: `fn name(` at the start of a line up to the next `}` that
# starts a line.
_HELPER = re.compile(r"^fn (?!main\b)\w+\(.*?^}", re.S | re.M)
_VEC4_OF = {"unary_vec4.wgsl": "unary.wgsl", "binary_vec4.wgsl": "binary.wgsl"}


@functools.lru_cache(maxsize=None)
def _source(template: str, expr: str) -> str:
    """The kernel text of `template` for `expr` (cached: one string object per kernel,
    which the device's pipeline cache then hashes once). The vec4 templates take the
    helper functions of their scalar template, which stays the one place they live."""
    scalar = _VEC4_OF.get(template)
    if scalar is None:
        return load_shader(template, EXPR=expr)
    helpers = "\n\n".join(_HELPER.findall(load_shader(scalar, EXPR="0.0")))
    return load_shader(template, EXPR=expr, HELPERS=helpers)


def _grid(dev, threads: int):
    groups = -(-threads // WORKGROUP_1D)
    return (groups, 1, 1) if groups <= WORKGROUPS_PER_DIM else dev.grid(groups)


def unary(dev, name: str, x, alpha: float = 0.0, beta: float = 0.0, out=None):
    """out[i] = UNARY[name](x[i]); `out` may be given to write in place of a new buffer."""
    check_buffer(name, "x", x)
    n = x.len
    if out is None:
        out = dev.empty(n)
    if n % 4 == 0:  # vec4 loads and stores: a quarter of the threads, wider memory accesses
        kernel = dev.kernel(name, _source("unary_vec4.wgsl", UNARY[name]), 1, 1, "Iff")
        dev.launch(kernel, (x,), (out,), (n // 4, alpha, beta), _grid(dev, n // 4))
    else:
        kernel = dev.kernel(name, _source("unary.wgsl", UNARY[name]), 1, 1, "Iff")
        dev.launch(kernel, (x,), (out,), (n, alpha, beta), _grid(dev, n))
    return out


def binary(dev, name: str, a, b, alpha: float = 0.0):
    """out[i] = BINARY[name](a[i], b[i]) for equal-length a and b."""
    check_same_len(name, a, b)
    n = a.len
    out = dev.empty(n)
    if n % 4 == 0:
        kernel = dev.kernel(name, _source("binary_vec4.wgsl", BINARY[name]), 2, 1, "If")
        dev.launch(kernel, (a, b), (out,), (n // 4, alpha), _grid(dev, n // 4))
    else:
        kernel = dev.kernel(name, _source("binary.wgsl", BINARY[name]), 2, 1, "If")
        dev.launch(kernel, (a, b), (out,), (n, alpha), _grid(dev, n))
    return out


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
    return unary(dev, "swish", a)


def tanh_act(dev, a):
    return unary(dev, "tanh_act", a)


def relu_backward(dev, grad, x):
    """grad * (x > 0)."""
    return binary(dev, "relu_backward", grad, x)


def sigmoid_backward(dev, grad, y):
    """grad * y * (1 - y), y = sigmoid(x) (the forward output)."""
    return binary(dev, "sigmoid_backward", grad, y)


def swish_backward(dev, grad, x):
    """grad * (s + x s (1 - s)), s = sigmoid(x) (x is the forward input)."""
    return binary(dev, "swish_backward", grad, x)


def tanh_backward(dev, grad, y):
    """grad * (1 - y^2), y = tanh(x) (the forward output)."""
    return binary(dev, "tanh_backward", grad, y)
