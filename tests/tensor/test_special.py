"""anygpu.special against torch.special (and scipy.special where torch's own value is coarse:
ndtr's left tail, ndtri) on the CPU: values over each function's domain and its tails, NaN and
inf as torch, float32 and float64, gradients against torch's autograd, out=, the module's import."""

import importlib
import math

import numpy as np
import pytest
import scipy.special
import torch

import anygpu as ag
from anygpu.ops import elementwise

from .helper import check_op

RNG = np.random.default_rng(2026)
EDGES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0])


def _uniform(low, high, n=400):
    return RNG.uniform(low, high, n)


def _log_uniform(low_exp, high_exp, n=200):
    return 10.0 ** RNG.uniform(low_exp, high_exp, n)


def _torch_ref(name):
    return lambda x: getattr(torch.special, name)(torch.tensor(x, dtype=torch.float64)).numpy()


# name, inputs, float64 reference of the (rounded) inputs, relative tolerance as a function of x for
# float32 and a flat one for float64 (the bounds each function's docstring states)
VALUE_CASES = [
    ("erfcx", np.concatenate([_uniform(-5, 1e4), _uniform(-5, 5), _uniform(-10, -9), _log_uniform(4, 30), EDGES]),
     _torch_ref("erfcx"), lambda x: 3e-7 * (1 + 2 * x * x), 2e-7),
    ("ndtr", np.concatenate([_uniform(-40, 40), _uniform(-14, 0), EDGES]), scipy.special.ndtr,
     lambda x: 8e-7 * (1 + x * x / 20), 2e-7),
    ("log_ndtr", np.concatenate([_uniform(-40, 40), _uniform(-1e4, 0, 50), -_log_uniform(4, 30, 50), EDGES]),
     _torch_ref("log_ndtr"), lambda x: np.where(x < 0, 3e-7, 8e-7 * (1 + x * x / 20)), 2e-7),
    ("ndtri", np.concatenate([_uniform(0, 1), _log_uniform(-37, -1), 1 - _log_uniform(-7, -1), [0, 1, -0.1, 1.1],
                              EDGES]), scipy.special.ndtri, lambda x: 5e-7, 3e-7),
    ("i0e", np.concatenate([_uniform(-100, 100), _uniform(-5, 5), _uniform(-1e4, 1e4, 50), EDGES]),
     _torch_ref("i0e"), lambda x: 8e-7, 6e-7),
    ("i1e", np.concatenate([_uniform(-100, 100), _uniform(-5, 5), _uniform(-1e4, 1e4, 50), EDGES]),
     _torch_ref("i1e"), lambda x: 8e-7, 6e-7),
    ("i1", np.concatenate([_uniform(-91, 91), _uniform(-5, 5), [95.0, -95.0], EDGES]),
     _torch_ref("i1"), lambda x: 6e-7 + 8e-8 * np.abs(x), 6e-7),
    ("entr", np.concatenate([_uniform(-1, 5), _uniform(0.9, 1.1, 100), _log_uniform(-30, 30, 100), EDGES]),
     _torch_ref("entr"), lambda x: 1e-6, 1e-12),
    ("spherical_bessel_j0", np.concatenate([_uniform(-50, 50), _log_uniform(-20, 3, 100), EDGES]),
     _torch_ref("spherical_bessel_j0"), lambda x: 1e-6, 1e-12),
]


def _compare(actual, expected, x, rtol, tiny):
    """Equal NaNs and infinities; elsewhere |a - e| <= rtol(x) |e| + tiny (float32 flushes values
    below its normal range to 0)."""
    actual = np.asarray(actual, dtype=np.float64)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan, err_msg="NaN positions differ")
    infinite = np.isinf(expected)
    np.testing.assert_array_equal(actual[infinite], expected[infinite], err_msg="infinities differ")
    finite = ~nan & ~infinite
    with np.errstate(invalid="ignore"):
        bound = np.broadcast_to(rtol(x), x.shape)[finite] * np.abs(expected[finite]) + tiny
    error = np.abs(actual[finite] - expected[finite])
    ok = (error == 0) | (error <= bound)
    worst = int(np.argmax(~ok))
    assert np.all(ok), (f"at x = {x[finite][worst]!r}: {actual[finite][worst]!r} vs "
                                    f"{expected[finite][worst]!r}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, inputs, reference, rtol32, rtol64", VALUE_CASES, ids=[c[0] for c in VALUE_CASES])
def test_values_against_reference(name, inputs, reference, rtol32, rtol64, dtype):
    x = inputs.astype(dtype)  # the reference sees the same rounded inputs
    with np.errstate(all="ignore"):
        expected = reference(x.astype(np.float64)).astype(dtype).astype(np.float64)  # (overflow as the dtype's)
    out = getattr(ag.special, name)(ag.tensor(x))
    assert out.dtype is getattr(ag, dtype)
    if dtype == "float32":
        _compare(out.numpy(), expected, x.astype(np.float64), rtol32, 2e-38)
    else:
        _compare(out.numpy(), expected, x, lambda _: rtol64, 1e-300)


def test_spherical_bessel_j0_whatever_the_device_sin(monkeypatch):
    """float32 j0 to 1e-6 relative of float64's sin(x) / x, near sin's zeros too (float32
    multiples of pi), with the device's sin made as coarse as the H200's (whose j0 was off by
    1.2e-5 at x = -41.14): the argument is reduced exactly and sin is a polynomial below 1e5."""
    monkeypatch.setitem(elementwise.UNARY, "sin", "(sin(v) + 4e-6 * cos(5.0 * v))")
    rng = np.random.default_rng(7)
    x = np.concatenate([[-41.14, 1e-30, 1e-40, 0.0, 1.5707964], np.arange(1, 3000) * np.pi,
                        rng.uniform(-300, 300, 2000), -(10 ** rng.uniform(-6, 4.99, 500))]).astype(np.float32)
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = np.where(x64 == 0, 1.0, np.sin(x64) / x64)
    got = ag.special.spherical_bessel_j0(ag.tensor(x)).numpy()
    _compare(got, want, x64, lambda _: 1e-6, 2e-38)
    half = ag.special.spherical_bessel_j0(ag.tensor(x[:2500].astype(np.float16))).numpy()
    x16 = x[:2500].astype(np.float16).astype(np.float64)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(half, np.where(x16 == 0, 1.0, np.sin(x16) / x16), rtol=1e-3, atol=1e-7)


def test_ndtr_tail_where_torch_gives_zero():
    # torch's (1 + erf(x / sqrt 2)) / 2 is 0 below about -5.5 in float32; the CDF itself is not
    x = np.array([-6.0, -8.0, -10.0, -12.0], np.float32)
    out = ag.special.ndtr(ag.tensor(x)).numpy()
    np.testing.assert_allclose(out, scipy.special.ndtr(x.astype(np.float64)), rtol=5e-6)
    assert np.all(out > 0)


def test_ndtri_inverts_ndtr_far_left():
    p = np.array([1e-10, 1e-20, 1e-30, 1e-37], np.float32)
    x = ag.special.ndtri(ag.tensor(p))
    np.testing.assert_allclose(ag.special.log_ndtr(x).numpy(), np.log(p.astype(np.float64)), rtol=1e-5)


# name, inputs: functions that are anygpu ops under torch.special's names
ALIAS_CASES = [
    ("expit", _uniform(-20, 20, 50)), ("logit", _uniform(0.01, 0.99, 50)), ("erf", _uniform(-4, 4, 50)),
    ("erfc", _uniform(-4, 4, 50)), ("erfinv", _uniform(-0.99, 0.99, 50)), ("gammaln", _uniform(0.1, 20, 50)),
    ("digamma", _uniform(0.5, 20, 50)), ("psi", _uniform(0.5, 20, 50)), ("i0", _uniform(-20, 20, 50)),
    ("sinc", _uniform(-5, 5, 50)), ("log1p", _uniform(-0.9, 5, 50)), ("expm1", _uniform(-5, 5, 50)),
    ("exp2", _uniform(-10, 10, 50)),
]


@pytest.mark.parametrize("name, inputs", ALIAS_CASES, ids=[c[0] for c in ALIAS_CASES])
def test_aliases(name, inputs):
    x = np.concatenate([inputs, [np.nan]]).astype(np.float32)
    expected = getattr(torch.special, name)(torch.tensor(x)).numpy()
    actual = getattr(ag.special, name)(ag.tensor(x)).numpy()
    np.testing.assert_allclose(actual, expected, rtol=2e-5, atol=1e-5)


def test_keyword_forms():
    x = RNG.uniform(-3, 3, (3, 5)).astype(np.float32)
    tx, ax = torch.tensor(x), ag.tensor(x)
    p = RNG.uniform(0, 1, 7).astype(np.float32)
    pairs = [
        (torch.special.logit(torch.tensor(p), eps=0.2), ag.special.logit(ag.tensor(p), eps=0.2)),
        (torch.special.round(tx, decimals=2), ag.special.round(ax, decimals=2)),
        (torch.special.multigammaln(tx.abs() + 2, 3), ag.special.multigammaln(ax.abs() + 2, 3)),
        (torch.special.softmax(tx, 0), ag.special.softmax(ax, 0)),
        (torch.special.softmax(tx, dim=1, dtype=torch.float64), ag.special.softmax(ax, dim=1, dtype=ag.float64)),
        (torch.special.log_softmax(tx, -1), ag.special.log_softmax(ax, -1)),
        (torch.special.log_softmax(tx, 0, dtype=torch.float64), ag.special.log_softmax(ax, 0, dtype=ag.float64)),
        (torch.special.logsumexp(tx, 1), ag.special.logsumexp(ax, 1)),
        (torch.special.logsumexp(tx, (0, 1), keepdim=True), ag.special.logsumexp(ax, (0, 1), keepdim=True)),
        (torch.special.xlogy(tx.abs(), tx), ag.special.xlogy(ax.abs(), ax)),
        (torch.special.xlogy(2.0, tx.abs()), ag.special.xlogy(2.0, ax.abs())),
    ]
    for expected, actual in pairs:
        assert tuple(actual.shape) == tuple(expected.shape)
        assert str(actual.dtype) == str(expected.dtype)
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=2e-5, atol=2e-6)


def test_xlog1py_values():
    x = np.array([0.0, 0.0, 0.0, 2.0, -1.5, 0.0, 3.0, np.nan, 1.0], np.float32)
    y = np.array([-1.0, 0.5, np.inf, 0.25, 3.0, np.nan, -2.0, 1.0, -1.0], np.float32)
    expected = torch.special.xlog1py(torch.tensor(x), torch.tensor(y)).numpy()
    actual = ag.special.xlog1py(ag.tensor(x), ag.tensor(y)).numpy()
    np.testing.assert_allclose(actual, expected, rtol=1e-6)
    scalar = ag.special.xlog1py(2.0, ag.tensor(y[:5])).numpy()
    np.testing.assert_allclose(scalar, torch.special.xlog1py(2.0, torch.tensor(y[:5])).numpy(), rtol=1e-6)


# fn(m, x) for m = torch or anygpu; forward and the gradient of a weighted sum through check_op
GRAD_CASES = [
    ("erfcx", _uniform(-3, 10, 40), lambda m, x: m.special.erfcx(x)),
    ("ndtr", _uniform(-8, 8, 40), lambda m, x: m.special.ndtr(x)),
    ("log_ndtr", _uniform(-30, 8, 40), lambda m, x: m.special.log_ndtr(x)),
    ("ndtri", _uniform(0.001, 0.999, 40), lambda m, x: m.special.ndtri(x)),
    ("i0e", np.concatenate([_uniform(-30, 30, 40), [0.0]]), lambda m, x: m.special.i0e(x)),
    ("i1", np.concatenate([_uniform(-10, 10, 40), [0.0]]), lambda m, x: m.special.i1(x)),
    ("i1e", np.concatenate([_uniform(-30, 30, 40), [0.0]]), lambda m, x: m.special.i1e(x)),
    ("entr", _uniform(0.01, 5, 40), lambda m, x: m.special.entr(x)),
    ("expit", _uniform(-8, 8, 40), lambda m, x: m.special.expit(x)),
    ("logit", _uniform(0.05, 0.95, 40), lambda m, x: m.special.logit(x)),
    ("gammaln", _uniform(0.5, 10, 40), lambda m, x: m.special.gammaln(x)),
    ("xlog1py/x", _uniform(-3, 3, 40), lambda m, x: m.special.xlog1py(x, x.detach().abs())),
]


@pytest.mark.parametrize("name, inputs, fn", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients(name, inputs, fn):
    check_op([inputs.astype(np.float32)], lambda x: fn(torch, x), lambda x: fn(ag, x), rtol=1e-4, atol=1e-5)


def test_xlog1py_gradients_at_zero():
    # (torch's gradient to other at x = 0, other = -1 is 0 / 0 = NaN; anygpu's is 0 there)
    x = np.array([0.0, 0.0, 1.5, -2.0, 0.0], np.float32)
    y = np.array([-1.5, 2.0, 0.5, 3.0, -2.0], np.float32)
    check_op([x, y], torch.special.xlog1py, ag.special.xlog1py, rtol=1e-5, atol=1e-6)


OUT_CASES = ["expit", "erf", "erfc", "erfcx", "erfinv", "gammaln", "digamma", "psi", "i0", "i0e", "i1", "i1e",
             "ndtr", "log_ndtr", "log1p", "expm1", "exp2", "sinc", "entr", "spherical_bessel_j0"]


@pytest.mark.parametrize("name", OUT_CASES)
def test_out(name):
    x = RNG.uniform(0.1, 0.9, (2, 3)).astype(np.float32)
    out = ag.zeros(2, 3)
    result = getattr(ag.special, name)(ag.tensor(x), out=out)
    assert result is out
    expected = getattr(torch.special, name)(torch.tensor(x)).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-7)  # (gammaln: within 3e-6)
    with pytest.raises(RuntimeError, match="out=... arguments don't support automatic differentiation"):
        getattr(ag.special, name)(ag.tensor(x, requires_grad=True), out=ag.zeros(2, 3))


def test_out_of_two_operand_and_keyword_functions():
    x = RNG.uniform(0.1, 0.9, (4,)).astype(np.float32)
    tx, ax = torch.tensor(x), ag.tensor(x)
    for name, args, kwargs in [("xlogy", (1,), {}), ("xlog1py", (1,), {}), ("logit", (), {"eps": 0.2}),
                               ("ndtri", (), {}), ("round", (), {"decimals": 1}), ("multigammaln", (), {})]:
        targs = [tx if a == 1 else a for a in args]
        aargs = [ax if a == 1 else a for a in args]
        if name == "multigammaln":
            targs, aargs = [2], [2]
        out = ag.zeros(4)
        assert getattr(ag.special, name)(ax + 1 if name == "multigammaln" else ax, *aargs, out=out, **kwargs) is out
        expected = getattr(torch.special, name)(tx + 1 if name == "multigammaln" else tx, *targs, **kwargs)
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=2e-6, atol=1e-6, err_msg=name)
    out = ag.zeros(3)
    assert ag.special.logsumexp(ag.tensor(x.reshape(1, 4).repeat(3, 0)), 1, out=out) is out
    np.testing.assert_allclose(out.numpy(), np.full(3, torch.logsumexp(tx, 0).item()), rtol=1e-6)


def test_integer_input_is_computed_in_float():
    for name in ("erfcx", "ndtr", "log_ndtr", "i0e", "i1", "i1e", "entr", "expit"):
        out = getattr(ag.special, name)(ag.tensor([0, 1, 3]))
        expected = getattr(torch.special, name)(torch.tensor([0, 1, 3]))
        assert str(out.dtype) == str(expected.dtype) == "torch.float32", name
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-6, err_msg=name)


def test_float16_computed_in_float32():
    x = np.array([-3.0, -0.5, 0.0, 1.5, 6.0], np.float16)
    for name in ("erfcx", "ndtr", "log_ndtr", "i0e", "i1e", "i1"):
        out = getattr(ag.special, name)(ag.tensor(x))
        assert out.dtype is ag.float16
        expected = getattr(torch.special, name)(torch.tensor(x, dtype=torch.float32)).half()
        np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-3, err_msg=name)


def test_module_resolves_as_attribute_and_import():
    module = importlib.import_module("anygpu.special")
    assert ag.special is module
    from anygpu.special import erfcx, log_ndtr  # noqa: F401
    for name in module.__all__:
        assert callable(getattr(module, name)), name
        assert hasattr(torch.special, name), f"{name} is not a torch.special name"
    assert math.isclose(ag.special.erfcx(ag.tensor(1e4)).item(), 1 / (1e4 * math.sqrt(math.pi)), rel_tol=1e-6)
