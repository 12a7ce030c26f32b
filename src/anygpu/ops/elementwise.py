"""Elementwise ops of the seed and their backward kernels (Layer 0).

Each op: check arguments, pick the kernel (one template, an expression per op), launch."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, check_same_len, grid_1d

# Expressions of `v` (input), `alpha`, `beta` (parameters).
UNARY = {
    "scale": "v * alpha",
    "add_scalar": "v + alpha",
    "relu": "max(v, 0.0)",
    "sigmoid": "1.0 / (1.0 + exp(-v))",
    "swish": "v / (1.0 + exp(-v))",
    # tanh via exp of a clamped argument: WGSL's tanh may return NaN for large |v| on some drivers.
    "tanh_act": "tanh(clamp(v, -15.0, 15.0))",
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
}


def unary(dev, name: str, x, alpha: float = 0.0, beta: float = 0.0, out=None):
    """out[i] = UNARY[name](x[i]); `out` may be given to write in place of a new buffer."""
    check_buffer(name, "x", x)
    kernel = dev.kernel(name, load_shader("unary.wgsl", EXPR=UNARY[name]), 1, 1, "Iff")
    if out is None:
        out = dev.empty(x.len)
    dev.launch(kernel, [x], [out], (x.len, alpha, beta), grid_1d(dev, x.len))
    return out


def binary(dev, name: str, a, b, alpha: float = 0.0):
    """out[i] = BINARY[name](a[i], b[i]) for equal-length a and b."""
    check_same_len(name, a, b)
    kernel = dev.kernel(name, load_shader("binary.wgsl", EXPR=BINARY[name]), 2, 1, "If")
    out = dev.empty(a.len)
    dev.launch(kernel, [a, b], [out], (a.len, alpha), grid_1d(dev, a.len))
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
