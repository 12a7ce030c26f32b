"""float64 (host) forms of the arithmetic Layer-0 ops (ops/host64/math.py), called through
the Device methods with HostBuffers: checked against torch float64 on the CPU at 1e-12
relative, against the f32 GPU op at float32 tolerance, and on NaN, inf and empty inputs."""

import inspect

import mpmath
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import anygpu as ag
from anygpu.ops import broadcast, elementwise, index, reduce, softmax
from anygpu.ops import random as random_ops
from anygpu.ops.host64 import HOST_OPS
from anygpu.runtime.host import HostBuffer

aten = torch.ops.aten

GROUP = (list(elementwise.__all__) + ["broadcast_binary", "reduce_axis"] + list(reduce.__all__)
         + list(broadcast.__all__) + ["matmul", "batch_matmul", "matmul_strided"] + list(softmax.__all__)
         + list(index.__all__) + ["sort_rows", "index_put"] + list(random_ops.__all__))

EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e300, -1e300, 5e-324, 1.0, -1.0, 0.5, -0.5, 2.5, -3.25])


def host(dev, arr):
    return dev.upload(np.asarray(arr, dtype=np.float64), "f64")


def f32_values(rng, n, scale=2.0):
    """Random doubles that float32 holds exactly (so the f32 GPU op sees the same inputs)."""
    return (rng.standard_normal(n) * scale).astype(np.float32).astype(np.float64)


def tensor(arr):
    return torch.tensor(np.asarray(arr, dtype=np.float64), dtype=torch.float64)


def tight(actual, expected, atol=0.0):
    """float64 agreement: 1e-12 relative, infinities and NaNs in the same places."""
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               rtol=1e-12, atol=atol, equal_nan=True)


def near_f32(actual, gpu, rtol=2e-5):
    """Agreement with the f32 GPU op at float32's tolerance (atol scaled to the data)."""
    gpu = np.asarray(gpu, dtype=np.float64)
    finite = np.abs(gpu[np.isfinite(gpu)])
    atol = rtol * max(1.0, float(finite.max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), gpu, rtol=rtol, atol=atol, equal_nan=True)


def test_every_op_of_the_group_has_a_float64_form_with_its_signature():
    assert len(GROUP) == len(set(GROUP)) > 30
    for name in GROUP:
        assert name in HOST_OPS, name
        gpu = inspect.signature(getattr(ag.Device, name).__wrapped__).parameters
        cpu = inspect.signature(HOST_OPS[name]).parameters
        assert [(p.name, p.kind, p.default) for p in gpu.values()] == \
            [(p.name, p.kind, p.default) for p in cpu.values()], name


# --- unary: every name of elementwise.UNARY ----------------------------------------------

# name -> (torch float64 reference, alpha, beta)
TORCH_UNARY = {
    "scale": (lambda t, a, b: t * a, 1.7, 0.0),
    "add_scalar": (lambda t, a, b: t + a, 0.3, 0.0),
    "relu": (lambda t, a, b: torch.relu(t), 0.0, 0.0),
    "sigmoid": (lambda t, a, b: torch.sigmoid(t), 0.0, 0.0),
    "silu": (lambda t, a, b: F.silu(t), 0.0, 0.0),
    "tanh": (lambda t, a, b: torch.tanh(t), 0.0, 0.0),
    "neg": (lambda t, a, b: -t, 0.0, 0.0),
    "exp": (lambda t, a, b: torch.exp(t), 0.0, 0.0),
    "log": (lambda t, a, b: torch.log(t), 0.0, 0.0),
    "sqrt": (lambda t, a, b: torch.sqrt(t), 0.0, 0.0),
    "abs": (lambda t, a, b: torch.abs(t), 0.0, 0.0),
    "square": (lambda t, a, b: torch.square(t), 0.0, 0.0),
    "reciprocal": (lambda t, a, b: torch.reciprocal(t), 0.0, 0.0),
    "clamp": (lambda t, a, b: torch.clamp(t, a, b), -0.5, 0.8),
    "gelu": (lambda t, a, b: F.gelu(t), 0.0, 0.0),
    "gelu_tanh": (lambda t, a, b: F.gelu(t, approximate="tanh"), 0.0, 0.0),
    "sign": (lambda t, a, b: torch.sign(t), 0.0, 0.0),
    "signbit": (lambda t, a, b: torch.signbit(t).double(), 0.0, 0.0),
    "frexp_mantissa": (lambda t, a, b: torch.frexp(t).mantissa, 0.0, 0.0),
    "frexp_exponent": (lambda t, a, b: torch.frexp(t).exponent.double(), 0.0, 0.0),
    "floor": (lambda t, a, b: torch.floor(t), 0.0, 0.0),
    "ceil": (lambda t, a, b: torch.ceil(t), 0.0, 0.0),
    "round": (lambda t, a, b: torch.round(t), 0.0, 0.0),
    "trunc": (lambda t, a, b: torch.trunc(t), 0.0, 0.0),
    "inside": (lambda t, a, b: ((t >= a) & (t <= b)).double(), -0.5, 0.8),
    "fill": (lambda t, a, b: torch.full_like(t, a), 2.5, 0.0),
    "div_scalar": (lambda t, a, b: t / a, 1.3, 0.0),
    "rsub_scalar": (lambda t, a, b: a - t, 0.7, 0.0),
    "rdiv_scalar": (lambda t, a, b: a / t, 0.9, 0.0),
    "pow_scalar": (lambda t, a, b: torch.pow(t, a), 1.7, 0.0),
    "log1p": (lambda t, a, b: torch.log1p(t), 0.0, 0.0),
    "sin": (lambda t, a, b: torch.sin(t), 0.0, 0.0),
    "cos": (lambda t, a, b: torch.cos(t), 0.0, 0.0),
    "atan": (lambda t, a, b: torch.atan(t), 0.0, 0.0),
    "asin": (lambda t, a, b: torch.asin(t), 0.0, 0.0),
    "acos": (lambda t, a, b: torch.acos(t), 0.0, 0.0),
    "erf": (lambda t, a, b: torch.special.erf(t), 0.0, 0.0),
    "leaky_relu": (lambda t, a, b: F.leaky_relu(t, a), 0.02, 0.0),
    "elu": (lambda t, a, b: F.elu(t, a), 1.1, 0.0),
    "softplus": (lambda t, a, b: F.softplus(t, beta=a, threshold=b), 2.0, 3.0),
    "softplus_grad": (lambda t, a, b: aten.softplus_backward(torch.ones_like(t), t, a, b), 2.0, 3.0),
}


def unary_data(name, rng, n=37):
    """Inputs in the op's domain (float32-exact)."""
    x = f32_values(rng, n)
    if name in ("log", "sqrt"):
        x = np.abs(x) + 0.125
    elif name == "log1p":
        x = np.float32(rng.uniform(-0.9, 3.0, n)).astype(np.float64)
    elif name in ("asin", "acos"):
        x = np.float32(rng.uniform(-0.95, 0.95, n)).astype(np.float64)
    elif name in ("reciprocal", "rdiv_scalar"):
        x = np.sign(x) * (np.abs(x) + 0.5)
    elif name == "pow_scalar":
        x = np.abs(x) + 0.125
    elif name in ("gelu", "gelu_tanh"):
        x = np.clip(x, -3.0, None)  # torch's 1 + erf (tanh) keeps 1e-12 only above -3
    return x


def test_unary_table_is_covered():
    assert set(TORCH_UNARY) == set(elementwise.UNARY)


@pytest.mark.parametrize("name", sorted(elementwise.UNARY))
def test_unary_matches_torch_float64_and_the_f32_op(dev, rng, name):
    ref, alpha, beta = TORCH_UNARY[name]
    x = unary_data(name, rng)
    out = dev.unary(name, host(dev, x), alpha, beta)
    assert isinstance(out, HostBuffer) and out.len == x.size
    tight(dev.read(out), ref(tensor(x), alpha, beta).numpy())
    near_f32(dev.read(out), dev.read(dev.unary(name, dev.upload(x.astype(np.float32)), alpha, beta)))


@pytest.mark.parametrize("name", sorted(elementwise.UNARY))
def test_unary_nan_inf_zeros_as_torch(dev, name):
    ref, alpha, beta = TORCH_UNARY[name]
    if name == "gelu":  # torch's 1 + erf(x / sqrt 2) cancels below -3 (host's erfc does not): see the tail test
        x = EDGES[(EDGES > -3) | ~np.isfinite(EDGES) | (np.abs(EDGES) > 1e100)]
    else:
        x = EDGES
    out = dev.read(dev.unary(name, host(dev, x), alpha, beta))
    expected = ref(tensor(x), alpha, beta).numpy()
    tight(out, expected, atol=1e-307)  # torch's log1p flushes the subnormal 5e-324 to 0
    zeros = expected == 0
    np.testing.assert_array_equal(np.signbit(out[zeros]), np.signbit(expected[zeros]), err_msg=name)
    assert dev.unary(name, host(dev, []), alpha, beta).len == 0


@pytest.mark.parametrize("exponent", [2.0, 3.0, -1.0, -2.0, 0.5, -0.5, 0.0, 1.0, 1.5, -3.0, np.nan])
def test_pow_scalar_exponents_as_torch(dev, exponent):
    x = np.concatenate([EDGES, [-8.0, -2.0, 1e-200, 1e200, 3.0]])
    out = dev.read(dev.unary("pow_scalar", host(dev, x), exponent))
    expected = torch.pow(tensor(x), float(exponent)).numpy()
    tight(out, expected)
    np.testing.assert_array_equal(np.signbit(out[expected == 0]), np.signbit(expected[expected == 0]))


def test_gelu_and_erf_are_float64_accurate_in_the_tails(dev):
    x = np.array([-30.0, -12.5, -8.0, -5.0, -3.7, -1e-8, 1e-300, 0.3, 4.0, 6.5])
    gelu = dev.read(dev.unary("gelu", host(dev, x)))
    erf = dev.read(dev.unary("erf", host(dev, x)))
    mpmath.mp.dps = 40
    gelu_ref = [float(v * mpmath.erfc(-v / mpmath.sqrt(2)) / 2) for v in map(mpmath.mpf, x)]
    erf_ref = [float(mpmath.erf(mpmath.mpf(v))) for v in x]
    # erfc(z)'s relative condition number is 2 z^2: at x = -30 the rounding of x / sqrt(2) alone is 1e-13
    np.testing.assert_allclose(gelu, gelu_ref, rtol=3e-13, atol=0)
    np.testing.assert_allclose(erf, erf_ref, rtol=1e-15, atol=0)
    assert gelu[0] < 0  # about -1e-197: 1 + erf would give 0
    # the tanh form and both derivatives, where 1 + tanh(u) and 1 - tanh(u)^2 cancel in torch's formulas
    mp, k, kappa = mpmath.mpf, mpmath.sqrt(2 / mpmath.pi), mpmath.mpf(0.044715)

    def tanh_form(v):
        s = 1 / (1 + mpmath.exp(-2 * k * (v + kappa * v ** 3)))
        return v * s, s + 2 * v * s * (1 - s) * k * (1 + 3 * kappa * v * v)

    def erf_form(v):
        return mpmath.erfc(-v / mpmath.sqrt(2)) / 2 + v * mpmath.npdf(v)

    x = np.array([-12.0, -7.1, -4.4, -2.0, 0.4, 3.3])
    ones = host(dev, np.ones(x.size))
    np.testing.assert_allclose(dev.read(dev.unary("gelu_tanh", host(dev, x))),
                               [float(tanh_form(mp(v))[0]) for v in x], rtol=1e-13, atol=0)  # exp(2u): 2|u| ~ 140
    np.testing.assert_allclose(dev.read(dev.binary("gelu_tanh_backward", ones, host(dev, x))),
                               [float(tanh_form(mp(v))[1]) for v in x], rtol=1e-13, atol=0)
    np.testing.assert_allclose(dev.read(dev.binary("gelu_backward", ones, host(dev, x))),
                               [float(erf_form(mp(v))) for v in x], rtol=1e-13, atol=0)


def test_unary_writes_out_in_place_and_refuses_bad_names(dev, rng):
    x = f32_values(rng, 9)
    out = host(dev, np.zeros(9))
    assert dev.unary("exp", host(dev, x), out=out) is out
    tight(out.arr, np.exp(x))
    with pytest.raises(ValueError, match="exp: out has 8 elements"):
        dev.unary("exp", host(dev, x), out=host(dev, np.zeros(8)))
    with pytest.raises(ValueError, match="'bitwise_not' is not defined for f64"):
        dev.unary("bitwise_not", host(dev, x))
    # a float32 operand beside float64 ones is widened (backward rules mix their f32 zeros in)
    widened = dev.unary("exp", dev.upload(x.astype(np.float32)), out=out)
    np.testing.assert_allclose(dev.read(widened), np.exp(x.astype(np.float32).astype(np.float64)), rtol=1e-15)


def test_named_activations_and_scale(dev, rng):
    x = f32_values(rng, 23)
    t = tensor(x)
    for method, ref in ((dev.relu, torch.relu), (dev.sigmoid, torch.sigmoid), (dev.swish, F.silu),
                        (dev.tanh_act, torch.tanh), (lambda b: dev.scale(b, -0.3), lambda t: t * -0.3)):
        tight(dev.read(method(host(dev, x))), ref(t).numpy())


# --- binary: every name of elementwise.BINARY and the comparisons ------------------------

def _share(fn):
    """a's share of the gradient of fn(a, b) by torch's autograd."""
    def share(a, b, alpha):
        a = a.clone().requires_grad_(True)
        fn(a, b).backward(torch.ones_like(a))
        return a.grad
    return share


TORCH_BINARY = {
    "add": lambda a, b, alpha: a + b,
    "sub": lambda a, b, alpha: a - b,
    "mul": lambda a, b, alpha: a * b,
    "div": lambda a, b, alpha: a / b,
    "pow": lambda a, b, alpha: torch.pow(a, b),
    "maximum": lambda a, b, alpha: torch.maximum(a, b),
    "minimum": lambda a, b, alpha: torch.minimum(a, b),
    "mask_mul": lambda a, b, alpha: torch.where(b != 0, a * b, torch.zeros_like(a)),
    "relu_backward": lambda a, b, alpha: aten.threshold_backward(a, b, 0),
    "sigmoid_backward": lambda a, b, alpha: aten.sigmoid_backward(a, b),
    "silu_backward": lambda a, b, alpha: aten.silu_backward(a, b),
    "tanh_backward": lambda a, b, alpha: aten.tanh_backward(a, b),
    "gelu_backward": lambda a, b, alpha: aten.gelu_backward(a, b),
    "gelu_tanh_backward": lambda a, b, alpha: aten.gelu_backward(a, b, approximate="tanh"),
    "leaky_relu_backward": lambda a, b, alpha: aten.leaky_relu_backward(a, b, alpha, False),
    "elu_backward": lambda a, b, alpha: aten.elu_backward(a, alpha, 1, 1, False, b),
    "maximum_share": _share(torch.maximum),
    "minimum_share": _share(torch.minimum),
    "same": lambda a, b, alpha: ((a == b) | (a.isnan() & b.isnan())).double(),
    "eq": lambda a, b, alpha: torch.eq(a, b),
    "ne": lambda a, b, alpha: torch.ne(a, b),
    "lt": lambda a, b, alpha: torch.lt(a, b),
    "le": lambda a, b, alpha: torch.le(a, b),
    "gt": lambda a, b, alpha: torch.gt(a, b),
    "ge": lambda a, b, alpha: torch.ge(a, b),
}
BINARY_NAMES = sorted(set(elementwise.BINARY) | set(elementwise.COMPARISONS))


def binary_data(name, rng, n=41):
    a, b = f32_values(rng, n), f32_values(rng, n)
    b[::5] = a[::5]  # ties
    if name == "div":
        b = np.sign(b) * (np.abs(b) + 0.5)
    if name == "pow":
        a = np.abs(a) + 0.125
    if name in ("sigmoid_backward", "tanh_backward"):
        b = np.tanh(b).astype(np.float32).astype(np.float64)
    return a, b


def test_binary_table_is_covered():
    assert set(TORCH_BINARY) == set(BINARY_NAMES)


@pytest.mark.parametrize("name", BINARY_NAMES)
def test_binary_matches_torch_float64_and_the_f32_op(dev, rng, name):
    a, b = binary_data(name, rng)
    alpha = 0.13
    out = dev.binary(name, host(dev, a), host(dev, b), alpha)
    expected = TORCH_BINARY[name](tensor(a), tensor(b), alpha).double().numpy()
    if name in elementwise.COMPARISONS:
        assert out.dtype == "f32"  # a 0/1 mask on the GPU, as the f32 op gives
    else:
        assert isinstance(out, HostBuffer)
    # a derivative is known to ulps of the gradient's scale: torch's gelu_tanh_backward cancels
    # (1 + t and 1 - t^2) where the host's does not
    tight(dev.read(out), expected, atol=1e-14 * np.abs(a).max() if name.endswith("_backward") else 0.0)
    gpu = dev.binary(name, dev.upload(a.astype(np.float32)), dev.upload(b.astype(np.float32)), alpha)
    near_f32(dev.read(out), dev.read(gpu))


@pytest.mark.parametrize("name", BINARY_NAMES)
def test_binary_nan_inf_zeros_as_torch(dev, name):
    grid = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.5, 2.0, 1e300])
    a, b = (v.reshape(-1) for v in np.meshgrid(grid, grid))
    out = dev.read(dev.binary(name, host(dev, a), host(dev, b), 0.25))
    expected = TORCH_BINARY[name](tensor(a), tensor(b), 0.25).double().numpy()
    tight(out, expected)
    zeros = expected == 0
    np.testing.assert_array_equal(np.signbit(out[zeros]), np.signbit(expected[zeros]), err_msg=name)
    assert dev.binary(name, host(dev, []), host(dev, []), 0.25).len == 0


@pytest.mark.parametrize("out_dtype", [None, "f32", "bool", "i32", "f64"])
def test_comparison_dtypes(dev, out_dtype):
    a, b = np.array([1.0, np.nan, 3.0, -0.0]), np.array([1.0, np.nan, 2.0, 0.0])
    out = dev.binary("le", host(dev, a), host(dev, b), out_dtype=out_dtype)
    assert out.dtype == (out_dtype or "f32")
    assert isinstance(out, HostBuffer) == (out_dtype == "f64")
    np.testing.assert_array_equal(dev.read(out).astype(np.float64), [1, 0, 0, 1])
    with pytest.raises(ValueError, match="add: out_dtype 'bool' is only for comparisons"):
        dev.binary("add", host(dev, a), host(dev, b), out_dtype="bool")


def test_named_binary_methods_and_bad_operands(dev, rng):
    a, b = f32_values(rng, 19), f32_values(rng, 19)
    ta, tb = tensor(a), tensor(b)
    for method, ref in ((dev.add, ta + tb), (dev.sub, ta - tb), (dev.mul, ta * tb),
                        (dev.relu_backward, aten.threshold_backward(ta, tb, 0)),
                        (dev.sigmoid_backward, aten.sigmoid_backward(ta, tb)),
                        (dev.swish_backward, aten.silu_backward(ta, tb)),
                        (dev.tanh_backward, aten.tanh_backward(ta, tb))):
        tight(dev.read(method(host(dev, a), host(dev, b))), ref.numpy())
    with pytest.raises(ValueError, match="add: a has 19 elements but b has 18"):
        dev.add(host(dev, a), host(dev, b[:18]))
    mixed = dev.mul(host(dev, a), dev.upload(b.astype(np.float32)))  # widened, as torch promotes
    np.testing.assert_allclose(dev.read(mixed), a * b.astype(np.float32).astype(np.float64), rtol=1e-15)
    with pytest.raises(ValueError, match="'floor_divide' is not defined for f64"):
        dev.binary("floor_divide", host(dev, a), host(dev, b))


# --- nd.py: broadcast_binary, reduce_axis ------------------------------------------------

@pytest.mark.parametrize("a_shape, b_shape", [((3, 1, 5), (4, 1)), ((7,), (2, 1, 7)), ((), (3,)), ((0, 3), (1, 3)),
                                              ((2, 3), (2, 3))])
@pytest.mark.parametrize("name, out_dtype", [("sub", None), ("pow", None), ("lt", "bool"),
                                             ("leaky_relu_backward", None), ("maximum", None)])
def test_broadcast_binary_as_torch(dev, rng, a_shape, b_shape, name, out_dtype):
    a = f32_values(rng, int(np.prod(a_shape))).reshape(a_shape)
    b = f32_values(rng, int(np.prod(b_shape))).reshape(b_shape)
    if name == "pow":
        a = np.abs(a) + 0.125
    a.reshape(-1)[::3] = np.nan
    out, shape = dev.broadcast_binary(name, host(dev, a), a_shape, host(dev, b), b_shape, 0.07, out_dtype)
    expected = TORCH_BINARY[name](tensor(a), tensor(b), 0.07)
    assert shape == tuple(expected.shape) and out.dtype == (out_dtype or "f64")
    tight(dev.read(out).reshape(shape), expected.double().numpy())


def test_broadcast_binary_refuses_bad_shapes(dev):
    with pytest.raises(ValueError, match=r"add: shapes \(3,\) and \(4,\) cannot be broadcast"):
        dev.broadcast_binary("add", host(dev, np.zeros(3)), (3,), host(dev, np.zeros(4)), (4,))
    with pytest.raises(ValueError, match="add: b has 4 elements, expected 5"):
        dev.broadcast_binary("add", host(dev, np.zeros(5)), (5,), host(dev, np.zeros(4)), (5,))


REDUCE_TORCH = {
    "sum": lambda t: t.sum(1), "max": lambda t: t.amax(1), "min": lambda t: t.amin(1),
    "argmax": lambda t: t.argmax(1), "argmin": lambda t: t.argmin(1),
}


@pytest.mark.parametrize("shape", [(3, 7, 5), (1, 11, 1), (4, 1, 3), (1, 9, 6), (5, 13, 1)])
@pytest.mark.parametrize("op", sorted(REDUCE_TORCH))
def test_reduce_axis_as_torch(dev, rng, shape, op):
    x = rng.integers(-3, 4, size=shape).astype(np.float64)  # ties everywhere
    x.reshape(-1)[rng.integers(0, x.size, size=2)] = np.nan
    if x.size > 20:
        x[0, 1:3, 0] = np.nan  # two NaNs in one slice: arg-ops give the first
    out = dev.reduce_axis(host(dev, x), *shape, op)
    expected = REDUCE_TORCH[op](tensor(x)).numpy()
    assert out.dtype == ("i32" if op.startswith("arg") else "f64")
    tight(dev.read(out).reshape(expected.shape), expected)
    if op != "sum":  # the f32 op agrees on integers (its sum is exact there too)
        gpu = dev.reduce_axis(dev.upload(x.astype(np.float32)), *shape, op)
        np.testing.assert_array_equal(dev.read(gpu).reshape(expected.shape), expected)


def test_reduce_axis_sums_in_float64_and_checks(dev, rng):
    x = np.array([[1e8, 1.0, -1e8], [0.1, 0.2, 0.3]]).T.reshape(1, 3, 2)
    tight(dev.read(dev.reduce_axis(host(dev, x), 1, 3, 2, "sum")), [1.0, 0.6000000000000001])
    y = rng.standard_normal((4, 301, 3))
    tight(dev.read(dev.reduce_axis(host(dev, y), 4, 301, 3)).reshape(4, 3), tensor(y).sum(1).numpy(),
          atol=1e-13 * np.abs(y).sum())
    assert dev.reduce_axis(host(dev, []), 0, 3, 2, "argmax").len == 0
    assert dev.reduce_axis(host(dev, []), 2, 3, 0, "max").len == 0
    with pytest.raises(ValueError, match="reduce_max: cannot reduce over an empty dimension"):
        dev.reduce_axis(host(dev, []), 2, 0, 3, "max")
    with pytest.raises(ValueError, match="reduce: op must be one of"):
        dev.reduce_axis(host(dev, np.zeros(3)), 1, 3, 1, "mean")


# --- reduce.py, broadcast.py ---------------------------------------------------------------

def test_sums_as_torch_with_cancellation(dev, rng):
    x = rng.standard_normal((7, 13)) * 1e3
    x[:, 0], x[:, 5], x[:, 9] = 1e8, 1.0, -1e8  # f32 loses the 1
    t = tensor(x)
    scale = 1e-13 * np.abs(x).sum()
    tight(dev.read(dev.sum_all(host(dev, x))), [t.sum().item()], atol=scale)
    tight(dev.read(dev.sum_inner(host(dev, x), 7, 13)), t.sum(1).numpy(), atol=scale)
    tight(dev.read(dev.sum_rows(host(dev, x), 7, 13)), t.sum(0).numpy(), atol=scale)
    exact = np.array([1e8, 1.0, -1e8, 0.5])
    assert dev.read(dev.sum_all(host(dev, exact))).tolist() == [1.5]
    assert dev.read(dev.sum_inner(host(dev, exact), 1, 4)).tolist() == [1.5]
    assert dev.read(dev.sum_rows(host(dev, exact), 4, 1)).tolist() == [1.5]
    empty = dev.sum_all(host(dev, []))
    assert isinstance(empty, HostBuffer) and dev.read(empty).tolist() == [0.0]
    assert np.isnan(dev.read(dev.sum_rows(host(dev, [1.0, np.nan, np.inf, 2.0]), 2, 2))).tolist() == [False, True]
    with pytest.raises(ValueError, match="sum_inner: a has 91 elements, expected outer\\*inner = 90"):
        dev.sum_inner(host(dev, x), 9, 10)
    with pytest.raises(ValueError, match="sum_rows: rows must be a positive integer"):
        dev.sum_rows(host(dev, x), 0, 13)


def test_bias_additions(dev, rng):
    a, b = f32_values(rng, 5 * 11).reshape(5, 11), f32_values(rng, 11)
    c = f32_values(rng, 5)
    tight(dev.read(dev.add_per_col(host(dev, a), host(dev, b), 5, 11)).reshape(5, 11), (tensor(a) + tensor(b)).numpy())
    tight(dev.read(dev.add_broadcast(host(dev, a), host(dev, c), 5, 11)).reshape(5, 11),
          (tensor(a) + tensor(c)[:, None]).numpy())
    near_f32(dev.read(dev.add_per_col(host(dev, a), host(dev, b), 5, 11)),
             dev.read(dev.add_per_col(dev.upload(a.astype(np.float32)), dev.upload(b.astype(np.float32)), 5, 11)))
    with pytest.raises(ValueError, match="add_per_col: b has 5 elements, expected cols = 11"):
        dev.add_per_col(host(dev, a), host(dev, c), 5, 11)
    mixed = dev.add_broadcast(host(dev, a), dev.upload(c.astype(np.float32)), 5, 11)  # widened
    assert mixed.dtype == "f64"


# --- matmul.py ----------------------------------------------------------------------------

@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("a_batch, b_batch", [(True, True), (False, True), (True, False), (False, False)])
@pytest.mark.parametrize("alpha, with_bias", [(1.0, False), (-0.37, True)])
def test_matmul_strided_as_torch(dev, rng, trans_a, trans_b, a_batch, b_batch, alpha, with_bias):
    batch, m, n, k = 3, 5, 7, 9
    a = rng.standard_normal((batch if a_batch else 1, *((k, m) if trans_a else (m, k))))
    b = rng.standard_normal((batch if b_batch else 1, *((n, k) if trans_b else (k, n))))
    bias = rng.standard_normal(n)
    out = dev.matmul_strided(host(dev, a), host(dev, b), batch, m, n, k, trans_a, trans_b, a_batch, b_batch, alpha,
                             bias=host(dev, bias) if with_bias else None)
    ta, tb = tensor(a), tensor(b)
    expected = alpha * torch.matmul(ta.transpose(1, 2) if trans_a else ta, tb.transpose(1, 2) if trans_b else tb)
    if with_bias:
        expected = expected + tensor(bias)
    expected = expected.expand(batch, m, n).numpy()
    assert isinstance(out, HostBuffer) and out.len == batch * m * n
    tight(dev.read(out).reshape(batch, m, n), expected, atol=1e-14 * k)


def test_matmul_and_batch_matmul(dev, rng):
    a, b = rng.standard_normal((5, 9)), rng.standard_normal((9, 7))
    a[0, :3], b[:3, 0] = [1e8, 1.0, -1e8], [1.0, 1.0, 1.0]  # f32 loses the 1
    out = dev.read(dev.matmul(host(dev, a), host(dev, b), 5, 7, 9)).reshape(5, 7)
    tight(out, (tensor(a) @ tensor(b)).numpy(), atol=1e-14 * 9)
    assert abs(out[0, 0] - (1.0 + a[0, 3:] @ b[3:, 0])) < 1e-12
    gpu = dev.read(dev.matmul(dev.upload(a.astype(np.float32)), dev.upload(b.astype(np.float32)), 5, 7, 9))
    near_f32(out[1:], gpu.reshape(5, 7)[1:])  # row 0: float32 loses the 1
    x, y = rng.standard_normal((4, 3, 11)), rng.standard_normal((4, 11, 5))
    tight(dev.read(dev.batch_matmul(host(dev, x), host(dev, y), 4, 3, 5, 11)).reshape(4, 3, 5),
          torch.bmm(tensor(x), tensor(y)).numpy(), atol=1e-14 * 11)
    inf = dev.read(dev.matmul(host(dev, [np.inf, 1.0]), host(dev, [1.0, np.nan]), 1, 1, 2))
    assert np.isnan(inf).all()


def test_matmul_refusals(dev):
    a, b = host(dev, np.ones(6)), host(dev, np.ones(6))
    with pytest.raises(ValueError, match="matmul: a and b must both be"):
        dev.matmul(a, dev.upload(np.ones(6, np.float32)), 2, 2, 3)
    with pytest.raises(ValueError, match="matmul: b has 6 elements, expected 3\\*3"):
        dev.matmul(a, b, 2, 3, 3)
    with pytest.raises(ValueError, match="out_dtype must be the operands' dtype"):
        dev.matmul_strided(a, b, 1, 2, 2, 3, out_dtype="f32")
    with pytest.raises(ValueError, match="bias must be of the operands' float dtype"):
        dev.matmul_strided(a, b, 1, 2, 2, 3, bias=dev.upload(np.ones(2, np.float32)))
    with pytest.raises(ValueError, match="batch_matmul: k must be a positive integer"):
        dev.batch_matmul(a, b, 1, 2, 2, 0)


# --- softmax.py ---------------------------------------------------------------------------

def test_softmax_and_backward_as_torch(dev, rng):
    x = rng.standard_normal((6, 13)) * 5
    x[1] = np.nan
    x[2, 3] = np.inf
    x[3] = -np.inf
    x[4, :12] = -np.inf
    out = dev.softmax(host(dev, x), 6, 13)
    expected = torch.softmax(tensor(x), 1).numpy()
    tight(dev.read(out).reshape(6, 13), expected)
    good = [0, 5]
    near_f32(dev.read(out).reshape(6, 13)[good],
             dev.read(dev.softmax(dev.upload(x.astype(np.float32)), 6, 13)).reshape(6, 13)[good])
    grad = rng.standard_normal((6, 13))
    y = expected.copy()
    back = dev.read(dev.softmax_backward(host(dev, grad), host(dev, y), 6, 13)).reshape(6, 13)
    tight(back, aten._softmax_backward_data(tensor(grad), tensor(y), 1, torch.float64).numpy(), atol=1e-15)
    with pytest.raises(ValueError, match="softmax: x has 78 elements, expected rows\\*cols = 70"):
        dev.softmax(host(dev, x), 7, 10)


# --- index.py -----------------------------------------------------------------------------

def test_gather_axis_as_torch(dev, rng):
    outer, dim, inner, n_index = 3, 7, 5, 4
    x = rng.standard_normal((outer, dim, inner))
    rows = np.array([2, -1, 6, 0], dtype=np.int32)
    out = dev.gather_axis(host(dev, x), dev.upload(rows), outer, dim, n_index, inner)
    tight(dev.read(out).reshape(outer, n_index, inner),
          torch.index_select(tensor(x), 1, torch.tensor(rows % dim)).numpy())
    near_f32(dev.read(out), dev.read(dev.gather_axis(dev.upload(x.astype(np.float32)), dev.upload(rows),
                                                     outer, dim, n_index, inner)))
    idx = rng.integers(-dim, dim, size=(outer, n_index, inner)).astype(np.int32)
    out = dev.gather_axis(host(dev, x), dev.upload(idx), outer, dim, n_index, inner, per_element=True)
    tight(dev.read(out).reshape(outer, n_index, inner),
          torch.gather(tensor(x), 1, torch.tensor(idx % dim, dtype=torch.int64)).numpy())
    bad = dev.gather_axis(host(dev, x), dev.upload(np.array([7, -8, 1], np.int32)), outer, dim, 3, inner)
    assert np.isnan(dev.read(bad).reshape(outer, 3, inner)[:, :2]).all()
    assert dev.gather_axis(host(dev, x), dev.upload(np.zeros(0, np.int32)), outer, dim, 0, inner).len == 0
    with pytest.raises(ValueError, match="gather: index must be an int32 buffer, got f64"):
        dev.gather_axis(host(dev, x), host(dev, rows), outer, dim, n_index, inner)


def test_scatter_add_axis_as_torch(dev, rng):
    outer, dim, inner, n_index = 3, 6, 5, 8
    src = rng.standard_normal((outer, n_index, inner))
    rows = np.array([1, 4, 1, -1, 9, 2, 1, 0], dtype=np.int32)  # repeats, a negative, one out of range
    out = dev.read(dev.scatter_add_axis(host(dev, src), dev.upload(rows), outer, dim, n_index, inner))
    keep = rows < dim
    expected = torch.zeros(outer, dim, inner, dtype=torch.float64).index_add_(
        1, torch.tensor(rows[keep] % dim), tensor(src[:, keep]))
    tight(out.reshape(outer, dim, inner), expected.numpy(), atol=1e-15)
    skipped = dev.read(dev.scatter_add_axis(host(dev, src), dev.upload(rows), outer, dim, n_index, inner, skip=1))
    assert np.all(skipped.reshape(outer, dim, inner)[:, 1] == 0)
    tight(np.delete(skipped.reshape(outer, dim, inner), 1, axis=1), np.delete(expected.numpy(), 1, axis=1),
          atol=1e-15)
    idx = rng.integers(-dim, dim, size=(outer, n_index, inner)).astype(np.int32)
    out = dev.read(dev.scatter_add_axis(host(dev, src), dev.upload(idx), outer, dim, n_index, inner, True))
    expected = torch.zeros(outer, dim, inner, dtype=torch.float64).scatter_add_(
        1, torch.tensor(idx % dim, dtype=torch.int64), tensor(src))
    tight(out.reshape(outer, dim, inner), expected.numpy(), atol=1e-15)
    near_f32(out, dev.read(dev.scatter_add_axis(dev.upload(src.astype(np.float32)), dev.upload(idx),
                                                outer, dim, n_index, inner, True)))
    empty = dev.scatter_add_axis(host(dev, []), dev.upload(np.zeros(0, np.int32)), 2, 3, 0, 4)
    assert isinstance(empty, HostBuffer) and dev.read(empty).tolist() == [0.0] * 24


# --- intmath.py: sort_rows, index_put ------------------------------------------------------

@pytest.mark.parametrize("descending", [False, True])
def test_sort_rows_as_torch_stable_sort(dev, rng, descending):
    x = rng.integers(-3, 4, size=(5, 11)).astype(np.float64) + 0.0
    x[0, [2, 7]] = np.nan
    x[1, [0, 5]] = [-0.0, 0.0]
    x[2, 4] = -np.inf
    x[3, 1:4] = np.nan
    x[4] = [1 + 1e-15, 1, 1, 1 - 1e-16, np.inf, 0, 0, 0, 0, 0, 0]  # f32 would tie these
    order = dev.sort_rows(host(dev, x), 5, 11, descending)
    assert order.dtype == "i32"
    expected = torch.sort(tensor(x), dim=1, descending=descending, stable=True).indices.numpy()
    np.testing.assert_array_equal(dev.read(order).reshape(5, 11), expected)
    assert dev.sort_rows(host(dev, []), 0, 4).len == 0


def test_index_put(dev, rng):
    dst = rng.standard_normal(17)
    src = rng.standard_normal(6)
    positions = np.array([3, 16, -1, 17, 0, 5], dtype=np.int32)  # -1 and 17 are outside: skipped
    buf = host(dev, dst)
    assert dev.index_put(buf, dev.upload(positions), host(dev, src)) is buf
    expected = dst.copy()
    expected[[3, 16, 0, 5]] = src[[0, 1, 4, 5]]
    assert dev.read(buf).tolist() == expected.tolist()
    with pytest.raises(ValueError, match="index_put: src is f32 but dst is f64"):
        dev.index_put(buf, dev.upload(positions), dev.upload(src.astype(np.float32)))
    with pytest.raises(ValueError, match="index_put: src has 5 elements, expected len\\(positions\\) = 6"):
        dev.index_put(buf, dev.upload(positions), host(dev, src[:5]))


# --- random.py ----------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [7, 12345678901234])
def test_dropout_keeps_the_f32_ops_mask(dev, rng, seed):
    x = np.abs(f32_values(rng, 1001)) + 0.25
    out = dev.read(dev.dropout(host(dev, x), 0.3, seed))
    gpu = dev.read(dev.dropout(dev.upload(x.astype(np.float32)), 0.3, seed))
    np.testing.assert_array_equal(out != 0, gpu != 0)
    kept = out != 0
    assert 0.2 < 1 - kept.mean() < 0.4
    assert out[kept].tolist() == (x[kept] * (1 / 0.7)).tolist()
    tight(dev.read(dev.dropout(host(dev, x), 0.0, seed)), x)
    other = dev.read(dev.dropout(host(dev, x), 0.3, seed + 1)) != 0
    assert (other != kept).any()
    assert dev.dropout(host(dev, []), 0.5, seed).len == 0
    with pytest.raises(ValueError, match="dropout: p must be in"):
        dev.dropout(host(dev, x), 1.0, seed)
