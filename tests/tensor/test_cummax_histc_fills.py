"""cummax / cummin, histc, exponential_ and apply_ against torch on the CPU: values, indices and
gradients on random data with ties and NaN, along every dim of odd sizes; edges and errors."""

import numpy as np
import pytest
import torch

import anygpu as ag

from .helper import close


def _with_ties_and_nan(rng, shape, nan: bool):
    x = np.round(rng.standard_normal(shape) * 2).astype(np.float32)  # rounded: many ties
    if nan:
        x.flat[rng.choice(x.size, 3, replace=False)] = np.nan
    return x


@pytest.mark.parametrize("op", ["cummax", "cummin"])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("nan", [False, True])
def test_cummax_cummin_match_torch(op, dim, nan):
    rng = np.random.default_rng(3)
    data = _with_ties_and_nan(rng, (5, 13, 3), nan)
    w = rng.standard_normal(data.shape).astype(np.float32)
    t = torch.tensor(data, requires_grad=True)
    tv, ti = getattr(torch, op)(t, dim)
    (torch.where(tv.isnan(), 0.0, tv) * torch.tensor(w)).sum().backward()  # NaN values pass no gradient
    a = ag.tensor(data, requires_grad=True)
    av, ai = getattr(ag, op)(a, dim)
    (ag.where(av.isnan(), 0.0, av) * ag.tensor(w)).sum().backward()
    np.testing.assert_array_equal(ai.numpy(), ti.numpy())
    np.testing.assert_array_equal(av.numpy(), tv.detach().numpy())  # NaN in the same places
    close(a.grad.numpy(), t.grad.numpy())


def test_cummax_edges():
    ints = np.array([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]], np.int32)
    v, i = ag.tensor(ints).cummax(1)
    tv, ti = torch.tensor(ints).cummax(1)
    assert v.numpy().tolist() == tv.tolist() and i.numpy().tolist() == ti.tolist()
    v, i = ag.tensor(2.5).cummin(0)
    assert v.item() == 2.5 and i.item() == 0 and v.shape == () and i.shape == ()
    v, i = ag.zeros(3, 0).cummax(1)
    assert v.shape == (3, 0) and i.shape == (3, 0)
    with pytest.raises(IndexError):
        ag.zeros(3, 2).cummax(2)


@pytest.mark.parametrize("bins,low,high", [(4, 0, 3), (7, 0, 0), (1, -1, 1), (10, -0.5, 0.25)])
def test_histc_matches_torch(bins, low, high):
    rng = np.random.default_rng(4)
    data = (rng.standard_normal(301) * 1.3).astype(np.float32)
    data[:4] = [low, high, high, low - 1]  # the edges: max falls in the last bin, outside ones are left out
    want = torch.histc(torch.tensor(data), bins=bins, min=low, max=high)
    np.testing.assert_array_equal(ag.histc(ag.tensor(data), bins=bins, min=low, max=high).numpy(), want.numpy())


def test_histc_edges_and_errors():
    assert ag.tensor([1.0, 1.0]).histc(3).numpy().tolist() == torch.tensor([1.0, 1.0]).histc(3).tolist()
    assert ag.tensor([1.0, np.nan, 2.0]).histc(2, 0, 2).numpy().tolist() == [0.0, 2.0]  # NaN counted nowhere
    with pytest.raises(ValueError, match="histc: bins must be positive"):
        ag.zeros(3).histc(0)
    with pytest.raises(ValueError, match="histc: max"):
        ag.zeros(3).histc(4, 2, 1)
    with pytest.raises(ValueError, match="histc: expected a float tensor"):
        ag.tensor([1, 2]).histc(4)


def test_exponential_fill_follows_its_distribution_and_the_seed():
    ag.manual_seed(7)
    x = ag.empty(200_000).exponential_(2.5)
    values = x.numpy().astype(np.float64)
    assert values.min() >= 0 and abs(values.mean() - 0.4) < 0.01 and abs(values.std() - 0.4) < 0.01
    ag.manual_seed(7)
    assert np.array_equal(ag.empty(200_000).exponential_(2.5).numpy(), x.numpy())
    with pytest.raises(ValueError, match="exponential_: lambd must be positive"):
        ag.empty(3).exponential_(0.0)


def test_apply_in_place_through_the_host():
    data = np.array([[1.5, -2.0], [0.25, 4.0]], np.float32)
    ours = ag.tensor(data)
    assert ours.apply_(lambda v: v * v + 1) is ours
    theirs = torch.tensor(data).apply_(lambda v: v * v + 1)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    ints = ag.tensor(np.arange(5, dtype=np.int32)).apply_(lambda v: v % 2)
    assert ints.numpy().tolist() == [0, 1, 0, 1, 0]


def test_erfinv_matches_torch():
    """Values within 3e-7 relative of float64 torch over [-1, 1] (near +-1 too), +-inf at +-1, NaN
    outside and for NaN; the gradient sqrt(pi)/2 exp(y^2) as torch's; int and f16 inputs as torch."""
    x = np.concatenate([np.linspace(-1, 1, 4001)[1:-1], [0.9999999, -0.999999, 1e-8, -1e-30, 0.0]]).astype(np.float32)
    want = torch.erfinv(torch.tensor(x, dtype=torch.float64)).numpy()
    got = ag.erfinv(ag.tensor(x)).numpy().astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=1e-37)
    edges = np.array([1.0, -1.0, 1.5, -2.0, np.nan], np.float32)
    np.testing.assert_array_equal(ag.tensor(edges).erfinv().numpy(), torch.tensor(edges).erfinv().numpy())
    data = np.random.default_rng(5).uniform(-0.999, 0.999, 37).astype(np.float32)
    t = torch.tensor(data, dtype=torch.float64, requires_grad=True)
    torch.erfinv(t).pow(2).sum().backward()
    a = ag.tensor(data, requires_grad=True)
    a.erfinv().pow(2).sum().backward()
    close(a.grad.numpy(), t.grad.numpy(), rtol=2e-5)
    assert ag.tensor([0, 1]).erfinv().numpy().tolist() == torch.tensor([0, 1]).erfinv().tolist()
    halves = data.astype(np.float16)
    half = ag.tensor(halves).erfinv()
    assert half.dtype == ag.float16  # computed in f32, rounded once: within an f16 ulp of the true value
    np.testing.assert_allclose(half.numpy().astype(np.float64),
                               torch.erfinv(torch.tensor(halves, dtype=torch.float64)).numpy(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("keepdim", [False, True])
def test_mode_matches_torch(dim, keepdim):
    """Small integers as floats (many ties between counts: the smallest value wins, the index of its
    last occurrence); the gradient lands on that index as torch's. (No NaN here: torch's CPU mode
    gives order-dependent answers for rows holding NaN, e.g. 0 for [2, 1, nan, 0, 3, 1].)"""
    rng = np.random.default_rng(6)
    data = rng.integers(0, 4, (6, 9, 5)).astype(np.float32)
    w = rng.standard_normal(np.delete(np.array(data.shape), dim % 3) if not keepdim else
                            [1 if k == dim % 3 else s for k, s in enumerate(data.shape)]).astype(np.float32)
    t = torch.tensor(data, requires_grad=True)
    tv, ti = torch.mode(t, dim, keepdim)
    (tv * torch.tensor(w)).sum().backward()
    a = ag.tensor(data, requires_grad=True)
    av, ai = ag.mode(a, dim, keepdim)
    (av * ag.tensor(w)).sum().backward()
    np.testing.assert_array_equal(ai.numpy(), ti.numpy())
    np.testing.assert_array_equal(av.numpy(), tv.detach().numpy())
    close(a.grad.numpy(), t.grad.numpy())


def test_mode_edges():
    # NaN never equals NaN, so each counts once: here 1 (twice) is the mode
    v, i = ag.tensor([1.0, np.nan, 1.0, np.nan, 2.0]).mode()
    assert v.item() == 1.0 and i.item() == 2
    v, i = ag.tensor(4.0).mode()
    assert v.item() == 4.0 and i.item() == 0
    ints = np.array([7, 3, 7, 3, 1], np.int32)
    v, i = ag.tensor(ints).mode()
    tv, ti = torch.tensor(ints).mode()
    assert v.item() == tv.item() and i.item() == ti.item()
    with pytest.raises(ValueError, match="mode: dimension 1 of shape"):
        ag.zeros(3, 0).mode(1)


def test_lgamma_and_digamma_match_torch():
    """Values within 3e-6 of max(|y|, 1) of float64 torch on [-9.7, 40] (near the poles too) and at
    the extremes; infinities and NaN where torch's float32 has them; lgamma's gradient is digamma,
    digamma's the derivative of its series (trigamma to float32 accuracy)."""
    x = np.concatenate([np.linspace(-9.7, 40, 3001), [-6.9999, -1e-3, 1e-6, 0.5, 1.4616321, 1e30]]).astype(np.float32)
    for name in ("lgamma", "digamma"):
        want = getattr(torch, name)(torch.tensor(x, dtype=torch.float64)).numpy()
        got = getattr(ag, name)(ag.tensor(x)).numpy().astype(np.float64)
        assert np.all(np.abs(got - want) <= 3e-6 * np.maximum(np.abs(want), 1)), name
        # (-0.0 left out: digamma(-0) is +inf where the driver keeps the sign of zero, as lavapipe does)
        edges = np.array([0.0, -1.0, -4.0, 1.0, 2.0, 3e38, np.inf, -np.inf, np.nan], np.float32)
        np.testing.assert_array_equal(getattr(ag, name)(ag.tensor(edges)).numpy(),
                                      getattr(torch, name)(torch.tensor(edges)).numpy())
    data = np.random.default_rng(8).uniform(-4.5, 9.0, 41).astype(np.float32)
    data = data[np.abs(data - np.round(data)) > 0.05]  # away from the poles
    for name, rtol in (("lgamma", 2e-5), ("digamma", 2e-3)):
        t = torch.tensor(data, dtype=torch.float64, requires_grad=True)
        getattr(torch, name)(t).sum().backward()
        a = ag.tensor(data, requires_grad=True)
        getattr(ag, name)(a).sum().backward()
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=1e-4)
