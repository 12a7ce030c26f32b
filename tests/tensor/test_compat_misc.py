"""tensor/compat_misc.py against torch on the CPU: in-place addmm_/baddbmm_/cumsum_/cumprod_/
tril_/triu_/renorm_, renorm, detach_, mvlgamma, the complex API on real tensors, is_cpu,
retains_grad, register_post_accumulate_grad_hook, hardshrink, prelu and bernoulli."""

import math

import numpy as np
import pytest
import torch

import anygpu as ag

from .helper import check_op

RNG = np.random.default_rng(47)


def _data(*shape, low=-3.0, high=3.0):
    return RNG.uniform(low, high, size=shape).astype(np.float32)


def case(name, inputs, fn, **tol):
    return pytest.param(inputs, fn, tol, id=name)


# fn(m, *tensors), m = torch or anygpu; forward and gradients through helper.check_op
CASES = [
    case("renorm/p2-dim0", [(4, 3, 5)], lambda m, x: x.renorm(2, 0, 1.5)),
    case("renorm/p1-dim-1", [(3, 7)], lambda m, x: m.renorm(x, 1, -1, 2.0)),
    case("renorm/p3-big-maxnorm", [(5, 2, 3)], lambda m, x: x.renorm(3, 1, 100.0)),
    case("renorm/inf", [(3, 6)], lambda m, x: x.renorm(math.inf, 0, 0.5)),
    case("mvlgamma/p1", [_data(7, low=0.5, high=6)], lambda m, x: x.mvlgamma(1), rtol=1e-4, atol=1e-4),
    case("mvlgamma/p3", [_data(3, 4, low=1.2, high=8)], lambda m, x: m.mvlgamma(x, 3), rtol=1e-4, atol=1e-4),
    case("angle", [np.array([1.5, -2.0, 0.0, -0.0, np.nan, np.inf, -np.inf], np.float32)],
         lambda m, x: x.angle()),
    case("angle/torch", [(4, 5)], lambda m, x: m.angle(x)),
    case("hardshrink", [np.array([np.nan, 0.5, -0.5, 0.6, -0.7, 0.1, 2.0], np.float32)],
         lambda m, x: x.hardshrink()),
    case("hardshrink/lambd", [(5, 6)], lambda m, x: m.hardshrink(x, 1.2)),
    case("prelu", [(2, 3, 4), (3,)], lambda m, x, w: x.prelu(w)),
    case("prelu/torch", [(5, 2)], lambda m, x: m.prelu(x, m.tensor([0.3]))),
    case("conj", [(3, 4)], lambda m, x: x.conj() * 2 + m.conj_physical(x) + x.resolve_conj() + x.resolve_neg()),
    case("real", [(3, 4)], lambda m, x: x.real * 3 + m.real(x)),
]


@pytest.mark.parametrize("inputs, fn, tol", CASES)
def test_against_torch(inputs, fn, tol):
    check_op(inputs, lambda *t: fn(torch, *t), lambda *a: fn(ag, *a), **tol)


def test_angle_int_and_half():
    for values, dtype in (([3, -2, 0], "int64"), ([1.5, -0.5, 0.0], "float16")):
        expected = torch.tensor(values, dtype=getattr(torch, dtype)).angle()
        actual = ag.tensor(values, dtype=getattr(ag, dtype)).angle()
        assert str(actual.dtype) == str(expected.dtype)
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-3)


def test_mvlgamma_int_and_errors():
    np.testing.assert_allclose(ag.mvlgamma(ag.tensor([3, 4]), 2).numpy(),
                               torch.mvlgamma(torch.tensor([3, 4]), 2).numpy(), rtol=1e-5)
    with pytest.raises(RuntimeError, match="p has to be greater than or equal to 1"):
        ag.tensor([2.0]).mvlgamma(0)
    x = ag.tensor([2.5, 3.0])
    assert x.mvlgamma_(2) is x
    np.testing.assert_allclose(x.numpy(), torch.tensor([2.5, 3.0]).mvlgamma_(2).numpy(), rtol=1e-5)


@pytest.mark.parametrize("p, dim, maxnorm, error, message", [
    (-1, 0, 1.0, RuntimeError, "non-positive-norm"),
    (0, 0, 1.0, RuntimeError, "non-positive-norm"),
    (2, 0, -1.0, RuntimeError, "maxnorm to be >= 0"),
    (2, 2, 1.0, IndexError, "Dimension out of range"),
])
def test_renorm_errors(p, dim, maxnorm, error, message):
    with pytest.raises(error, match=message):
        torch.randn(3, 3).renorm(p, dim, maxnorm)
    with pytest.raises(error, match=message):
        ag.randn(3, 3).renorm(p, dim, maxnorm)


def test_renorm_1d_refused():
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        ag.randn(4).renorm(2, 0, 1.0)


# name, args, the torch method: each in-place form returns self with the out-of-place value
INPLACE = [
    ("addmm_", lambda m, x: x.addmm_(m.ones(3, 5) * 0.5, m.ones(5, 4), beta=0.5, alpha=2), (3, 4)),
    ("baddbmm_", lambda m, x: x.baddbmm_(m.ones(2, 3, 5), m.ones(2, 5, 4) * 0.25, beta=2), (2, 3, 4)),
    ("cumsum_", lambda m, x: x.cumsum_(1), (3, 6)),
    ("cumsum_/neg-dim", lambda m, x: x.cumsum_(-1, dtype=m.float32), (2, 3, 5)),
    ("cumprod_", lambda m, x: x.cumprod_(0), (4, 3)),
    ("tril_", lambda m, x: x.tril_(), (4, 5)),
    ("tril_/diagonal", lambda m, x: x.tril_(-1), (2, 4, 3)),
    ("triu_", lambda m, x: x.triu_(1), (5, 4)),
    ("renorm_", lambda m, x: x.renorm_(2, 1, 1.0), (3, 4)),
    ("mvlgamma_", lambda m, x: x.add_(6).mvlgamma_(2), (3, 4)),
]


@pytest.mark.parametrize("fn, shape", [pytest.param(f, s, id=n) for n, f, s in INPLACE])
def test_inplace_values_and_self(fn, shape):
    data = _data(*shape)
    expected = fn(torch, torch.tensor(data))
    x = ag.tensor(data)
    shared = x.detach()
    assert fn(ag, x) is x
    np.testing.assert_allclose(x.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(shared.numpy(), expected.numpy(), rtol=1e-5, atol=1e-5)  # written in x's buffer


@pytest.mark.parametrize("fn, shape", [pytest.param(f, s, id=n) for n, f, s in INPLACE])
def test_inplace_in_graph(fn, shape):
    """On a non-leaf: gradients flow through the in-place op as through torch's."""
    data = _data(*shape)
    grads = []
    for m in (torch, ag):
        leaf = m.tensor(data, requires_grad=True)
        y = leaf * 1.5
        out = fn(m, y)
        assert out is y
        (out * out).sum().backward()
        grads.append(leaf.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-4, atol=1e-4)


def test_inplace_refuses_leaf_and_bumps_version():
    x = ag.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x.tril_()
    y = ag.randn(3, 4)
    before = y._version
    y.cumsum_(0)
    assert y._version == before + 1


def test_inplace_saved_tensor_changed_fails_backward():
    for m in (torch, ag):
        leaf = m.tensor(_data(3, 3), requires_grad=True)
        y = leaf * 2
        z = y * y  # saves y
        y.triu_()
        with pytest.raises(RuntimeError):
            z.sum().backward()


def test_cumsum_inplace_other_dtype_refused():
    with pytest.raises(RuntimeError, match="Bad in-place call"):
        torch.randn(3).cumsum_(0, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="Bad in-place call"):
        ag.randn(3).cumsum_(0, dtype=ag.float64)


def test_detach_inplace():
    leaf = ag.randn(3, requires_grad=True)
    y = leaf * 2
    assert y.detach_() is y
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf
    assert leaf.detach_() is leaf and not leaf.requires_grad
    with pytest.raises(RuntimeError, match="Can't detach views in-place"):
        (ag.randn(4, requires_grad=True) * 1)[1:].detach_()


def test_complex_api_on_real_tensors():
    x = ag.randn(2, 3)
    for name in ("conj", "conj_physical", "conj_physical_", "resolve_conj", "resolve_neg"):
        assert getattr(x, name)() is x, name
    assert ag.conj(x) is x and ag.resolve_conj(x) is x and ag.real(x) is x
    assert x.real is x
    assert x.is_conj() is False and x.is_neg() is False and ag.is_conj(x) is False
    for m, t in ((torch, torch.randn(2)), (ag, x)):
        with pytest.raises(RuntimeError, match="imag is not implemented for tensors with non-complex dtypes."):
            _ = t.imag
        with pytest.raises(RuntimeError, match="imag is not implemented"):
            m.imag(t)


def test_is_cpu_false_as_is_cuda():
    x = ag.zeros(3, device="cpu")
    assert x.is_cpu is False and x.is_cuda is True and x.device.type == "cuda"


def test_retains_grad():
    for m in (torch, ag):
        leaf = m.randn(3, requires_grad=True)
        y = leaf * 2
        assert y.retains_grad is False
        y.retain_grad()
        leaf.retain_grad()  # a no-op on a leaf
        assert y.retains_grad is True and leaf.retains_grad is False


def test_post_accumulate_grad_hook():
    results = []
    for m in (torch, ag):
        w = m.tensor([1.0, -2.0, 3.0], requires_grad=True)
        b = m.tensor([0.5], requires_grad=True)
        seen = []
        handle = w.register_post_accumulate_grad_hook(lambda p: seen.append((p is w, p.grad.numpy().copy())))
        ((w * w).sum() + b.sum()).backward()
        ((w * 3).sum() * b.sum()).backward()  # accumulates: the hook sees the sum
        handle.remove()
        (w.sum() * 2).backward()
        assert len(seen) == 2 and all(same for same, _ in seen)
        results.append([g for _, g in seen])
    for got, expected in zip(results[1], results[0]):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_post_accumulate_grad_hook_errors():
    for t in (torch.randn(3), ag.randn(3)):
        with pytest.raises(RuntimeError, match="doesn't require gradient"):
            t.register_post_accumulate_grad_hook(print)
    for m in (torch, ag):
        with pytest.raises(RuntimeError, match="non-leaf"):
            (m.randn(3, requires_grad=True) * 2).register_post_accumulate_grad_hook(print)


def test_bernoulli_method():
    probabilities = ag.tensor([0.0, 1.0, 0.0, 1.0, 1.0])
    assert probabilities.bernoulli().tolist() == [0.0, 1.0, 0.0, 1.0, 1.0]
    assert ag.zeros(4).bernoulli(1.0).tolist() == [1.0] * 4
    ag.manual_seed(5)
    draws = ag.full((2000,), 0.3).bernoulli()
    ag.manual_seed(5)
    again = ag.bernoulli(ag.full((2000,), 0.3))
    assert draws.tolist() == again.tolist()  # the same stream as torch.bernoulli
    assert abs(draws.mean().item() - 0.3) < 0.05
    generator = ag.Generator().manual_seed(3)
    assert ag.rand(3, 4).bernoulli(0.5, generator=generator).shape == (3, 4)
