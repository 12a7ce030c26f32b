"""tensor/compat_reduce.py against torch on the CPU: nansum, nanmean, nanmedian, nanquantile,
logcumsumexp, cov, corrcoef, msort, unique_consecutive, trapezoid / trapz /
cumulative_trapezoid, sum_to_size, Tensor.where and Tensor.dist: values on random data of odd
shapes with NaN / inf, every dim (negative too), keepdim, dtypes, gradients, out= and errors."""

import warnings

import numpy as np
import pytest
import torch

import anygpu as ag

from .helper import close

NAN, INF = float("nan"), float("inf")
_TORCH = {"float32": torch.float32, "float16": torch.float16, "float64": torch.float64}
_AG = {"float32": ag.float32, "float16": ag.float16, "float64": ag.float64}


def _data(shape, seed=0, nan=0.2, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3).astype(dtype)
    if nan:
        x[rng.random(shape) < nan] = np.nan
    return x


def _pair(x, dtype="float32", grad=False):
    t = torch.tensor(x, dtype=_TORCH[dtype], requires_grad=grad)
    a = ag.tensor(x, dtype=_AG[dtype], requires_grad=grad)
    return t, a


def _same(actual, expected, rtol=1e-4, atol=1e-5):
    """Shape, dtype and values (NaN in the same places) of an anygpu result vs torch's."""
    assert tuple(actual.shape) == tuple(expected.shape), (actual.shape, expected.shape)
    assert str(actual.dtype) == str(expected.dtype), (actual.dtype, expected.dtype)
    want = expected.detach().double().numpy() if expected.dtype != torch.bool else expected.numpy()
    got = actual.numpy().astype(np.float64) if actual.dtype is not ag.bool else actual.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    infinite = np.isinf(want)
    np.testing.assert_array_equal(got[infinite], want[infinite])
    finite = np.isfinite(want)
    close(got[finite], want[finite], rtol=rtol, atol=atol)


def _grads(t_out, a_out, t_in, a_in, seed=1, rtol=1e-4, atol=1e-5, torch_nan_is_zero=False):
    w = np.random.default_rng(seed).uniform(0.5, 1.5, size=tuple(t_out.shape)).astype(np.float32)
    (t_out * torch.tensor(w, dtype=t_out.dtype)).sum().backward()
    (a_out * ag.tensor(w, dtype=a_out.dtype)).sum().backward()
    want = t_in.grad.double().numpy()
    if torch_nan_is_zero:
        want = np.nan_to_num(want, nan=0.0)
    got = a_in.grad.numpy().astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    close(np.nan_to_num(got), np.nan_to_num(want), rtol=rtol, atol=atol)


_DIMS = [None, 0, 1, 2, -1, -3, (0, 2), (-1, 1)]


# ------------------------------------------------------------------ nansum / nanmean
@pytest.mark.parametrize("op", ["nansum", "nanmean"])
@pytest.mark.parametrize("dim", _DIMS)
@pytest.mark.parametrize("keepdim", [False, True])
def test_nansum_nanmean_match_torch(op, dim, keepdim):
    x = _data((3, 5, 7), seed=2)
    x[1, :, 3] = np.nan  # a whole line of NaN: nansum 0, nanmean NaN
    t, a = _pair(x, grad=True)
    args = () if dim is None and not keepdim else (dim, keepdim)
    t_out, a_out = getattr(torch, op)(t, *args), getattr(a, op)(*args)
    _same(a_out, t_out)
    # torch's nanmean gradient is NaN (inf * 0) in a group of NaN only; anygpu's is 0 there
    _grads(t_out, a_out, t, a, torch_nan_is_zero=op == "nanmean")


@pytest.mark.parametrize("dtype", ["float16", "float64"])
@pytest.mark.parametrize("op", ["nansum", "nanmean"])
def test_nansum_nanmean_dtypes(op, dtype):
    x = _data((4, 9), seed=3)
    t, a = _pair(x, dtype)
    for dim in (None, 1, -2):
        _same(getattr(a, op)(dim), getattr(torch, op)(t, dim), rtol=2e-3 if dtype == "float16" else 1e-6)
    # dtype=: accumulate in float64
    t, a = _pair(x)
    _same(getattr(ag, op)(a, 1, dtype=ag.float64), getattr(torch, op)(t, 1, dtype=torch.float64), rtol=1e-6)


def test_nansum_integers_and_edges():
    ints = np.random.default_rng(4).integers(-50, 50, (5, 3)).astype(np.int64)
    for dim in (None, 0, -1):
        _same(ag.nansum(ag.tensor(ints), dim), torch.nansum(torch.tensor(ints), dim))
    _same(ag.tensor([True, False, True]).nansum(), torch.tensor([True, False, True]).nansum())
    for op in ("nansum", "nanmean"):
        _same(getattr(ag.zeros(2, 0), op)(1), getattr(torch.zeros(2, 0), op)(1))
        _same(getattr(ag.zeros(0), op)(), getattr(torch.zeros(0), op)())
        _same(getattr(ag.tensor(NAN), op)(0), getattr(torch.tensor(NAN), op)(0))
        with pytest.raises(IndexError):
            getattr(ag.zeros(2, 3), op)(2)
    with pytest.raises(ValueError):
        ag.tensor([1, 2]).nanmean()
    with pytest.raises(ValueError):
        ag.nanmean(ag.tensor([1.0, 2.0]), dtype=ag.int64)


# ------------------------------------------------------------------ nanmedian
def _ties(shape, seed, nan=0.3):
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal(shape) * 1.5).astype(np.float32)  # many ties
    x[rng.random(shape) < nan] = np.nan
    return x


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2])
@pytest.mark.parametrize("keepdim", [False, True])
def test_nanmedian_dim_matches_torch(dim, keepdim):
    x = _ties((6, 7, 5), seed=5)
    t, a = _pair(x, grad=True)
    tv, ti = torch.nanmedian(t, dim, keepdim)
    av, ai = a.nanmedian(dim, keepdim)
    _same(av, tv)
    np.testing.assert_array_equal(ai.numpy(), ti.numpy())  # torch's index among ties
    _grads(torch.where(tv.isnan(), 0.0, tv), ag.where(av.isnan(), 0.0, av), t, a)


def test_nanmedian_rows_of_nan_and_integers():
    x = np.array([[NAN] * 5, [1, NAN, NAN, 2, NAN], [3, 3, 3, NAN, 3]], np.float32)
    tv, ti = torch.nanmedian(torch.tensor(x), 1)
    av, ai = ag.nanmedian(ag.tensor(x), 1)
    _same(av, tv)
    np.testing.assert_array_equal(ai.numpy()[1:], ti.numpy()[1:])
    assert np.isnan(x[0, ai.numpy()[0]])  # a row of NaN: some NaN's index (torch's is unspecified)
    ints = np.random.default_rng(6).integers(-5, 5, (4, 9)).astype(np.int64)
    for dim in (0, 1):
        tv, ti = torch.tensor(ints).nanmedian(dim)
        av, ai = ag.tensor(ints).nanmedian(dim)
        _same(av, tv)
        np.testing.assert_array_equal(ai.numpy(), ti.numpy())
    _same(ag.tensor(ints).nanmedian(), torch.tensor(ints).nanmedian())


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
def test_nanmedian_all_and_its_gradient(dtype):
    x = _ties((5, 7), seed=7)
    t, a = _pair(x, dtype, grad=True)
    t_out, a_out = torch.nanmedian(t), ag.nanmedian(a)
    _same(a_out, t_out)
    t_out.backward()
    a_out.backward()  # shared evenly among the values equal to the median, as torch
    close(a.grad.numpy(), t.grad.numpy())
    _same(ag.zeros(0).nanmedian(), torch.zeros(0).nanmedian())
    _same(ag.tensor([NAN, NAN]).nanmedian(), torch.tensor([NAN, NAN]).nanmedian())


def test_nanmedian_errors_and_out():
    with pytest.raises(IndexError):
        ag.zeros(2, 0).nanmedian(1)
    with pytest.raises(IndexError):
        ag.zeros(2, 3).nanmedian(-3)
    v, i = ag.tensor(2.0).nanmedian(0)
    assert v.shape == () and i.shape == () and v.item() == 2.0 and i.item() == 0
    x = _ties((3, 8), seed=8)
    values, indices = ag.zeros(0), ag.zeros(0, dtype=ag.int64)
    ag.nanmedian(ag.tensor(x), 1, out=(values, indices))
    tv, ti = torch.nanmedian(torch.tensor(x), 1)
    _same(values, tv)
    np.testing.assert_array_equal(indices.numpy(), ti.numpy())


# ------------------------------------------------------------------ nanquantile
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("dim,keepdim", [(None, False), (None, True), (0, False), (1, True), (-1, False)])
def test_nanquantile_matches_torch(interpolation, dim, keepdim):
    x = _data((7, 9), seed=9, nan=0.3)
    x[2] = np.nan
    x[:, 4] = np.nan
    t, a = _pair(x, grad=True)
    for q in (0.0, 0.37, 0.5, 1.0, [0.1, 0.5, 0.9]):
        tq = torch.tensor(q) if isinstance(q, list) else q
        aq = ag.tensor(q) if isinstance(q, list) else q
        t_out = torch.nanquantile(t, tq, dim, keepdim, interpolation=interpolation)
        a_out = a.nanquantile(aq, dim, keepdim, interpolation=interpolation)
        _same(a_out, t_out)
    if interpolation == "linear":
        t_out = torch.nanquantile(t, torch.tensor([0.2, 0.75]), dim, keepdim)
        a_out = a.nanquantile(ag.tensor([0.2, 0.75]), dim, keepdim)
        _grads(torch.where(t_out.isnan(), 0.0, t_out), ag.where(a_out.isnan(), 0.0, a_out), t, a)


def test_nanquantile_float64_and_errors():
    x = _data((5, 6), seed=10)
    t, a = _pair(x, "float64")
    _same(a.nanquantile(0.3, 1), torch.nanquantile(t, 0.3, 1), rtol=1e-9)
    _same(ag.tensor(3.0).nanquantile(0.5, 0), torch.tensor(3.0).nanquantile(0.5, 0))
    out = ag.zeros(0)
    ag.nanquantile(ag.tensor(x), 0.25, dim=0, out=out)
    _same(out, torch.nanquantile(torch.tensor(x), 0.25, dim=0))
    with pytest.raises(ValueError):
        ag.tensor([1.0, 2.0]).nanquantile(1.5)
    with pytest.raises(ValueError):
        ag.tensor([1.0, 2.0]).nanquantile(ag.tensor([[0.5]]))
    with pytest.raises(ValueError):
        ag.tensor([1, 2]).nanquantile(0.5)
    with pytest.raises(ValueError):
        ag.zeros(2, 0).nanquantile(0.5, 0)
    with pytest.raises(ValueError):
        ag.tensor([1.0]).nanquantile(0.5, interpolation="cubic")
    with pytest.raises(IndexError):
        ag.zeros(2, 3).nanquantile(0.5, 2)


# ------------------------------------------------------------------ logcumsumexp
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_logcumsumexp_matches_torch(dim):
    rng = np.random.default_rng(11)
    x = (rng.standard_normal((4, 37, 6)) * 30).astype(np.float32)  # spread wide: exp over/underflows
    t, a = _pair(x, grad=True)
    t_out, a_out = torch.logcumsumexp(t, dim), a.logcumsumexp(dim)
    _same(a_out, t_out)
    _grads(t_out, a_out, t, a, atol=1e-4)


def test_logcumsumexp_infinities_and_nan():
    x = np.array([[1, 2, -300, INF, 4, -INF],
                  [-INF, -INF, 0, NAN, 1, 2],
                  [-INF, -INF, -INF, -INF, -INF, 5],
                  [INF, INF, -INF, 3, 1e30, -1e30],
                  [-88, -90, 88, 89, 0, 700]], np.float32)
    t, a = _pair(x, grad=True)
    t_out, a_out = torch.logcumsumexp(t, 1), ag.logcumsumexp(a, 1)
    _same(a_out, t_out)
    _grads(t_out, a_out, t, a)  # torch's rule, NaN where its gives NaN (a leading -inf)


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_logcumsumexp_dtypes(dtype):
    x = _data((3, 300), seed=12, nan=0)
    t, a = _pair(x, dtype, grad=True)
    t_out, a_out = torch.logcumsumexp(t, -1), a.logcumsumexp(-1)
    _same(a_out, t_out, rtol=2e-3 if dtype == "float16" else 1e-9)
    _grads(t_out, a_out, t, a, rtol=1e-2 if dtype == "float16" else 1e-8)


def test_logcumsumexp_edges_and_out():
    _same(ag.tensor(3.0).logcumsumexp(0), torch.tensor(3.0).logcumsumexp(0))
    _same(ag.zeros(2, 0).logcumsumexp(1), torch.zeros(2, 0).logcumsumexp(1))
    x = _data((4, 5), seed=13, nan=0)
    out = ag.zeros(0)
    ag.logcumsumexp(ag.tensor(x), 0, out=out)
    _same(out, torch.logcumsumexp(torch.tensor(x), 0))
    with pytest.raises(ValueError):
        ag.tensor([1, 2]).logcumsumexp(0)
    with pytest.raises(IndexError):
        ag.zeros(2, 3).logcumsumexp(2)


# ------------------------------------------------------------------ cov / corrcoef
@pytest.mark.filterwarnings("ignore:cov")  # (3, 2) with correction 2: no degrees of freedom left
@pytest.mark.parametrize("shape", [(4, 9), (1, 7), (9,), (3, 2)])
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_cov_matches_torch(shape, correction):
    x = _data(shape, seed=14, nan=0)
    t, a = _pair(x, grad=True)
    t_out, a_out = torch.cov(t, correction=correction), a.cov(correction=correction)
    _same(a_out, t_out)
    if shape != (3, 2) or correction < 2:
        _grads(t_out, a_out, t, a)


@pytest.mark.parametrize("weights", ["f", "a", "fa"])
def test_cov_weights_match_torch(weights):
    rng = np.random.default_rng(15)
    x = _data((3, 11), seed=16, nan=0)
    fw = rng.integers(0, 4, 11)
    aw = rng.uniform(0.1, 2.0, 11).astype(np.float32)
    t, a = _pair(x, grad=True)
    taw, aaw = _pair(aw, grad=True)
    t_kw, a_kw = {}, {}
    if "f" in weights:
        t_kw["fweights"], a_kw["fweights"] = torch.tensor(fw), ag.tensor(fw)
    if "a" in weights:
        t_kw["aweights"], a_kw["aweights"] = taw, aaw
    for correction in (0, 1, 3):
        t_out = torch.cov(t, correction=correction, **t_kw)
        a_out = ag.cov(a, correction=correction, **a_kw)
        _same(a_out, t_out)
    _grads(t_out, a_out, t, a)
    if "a" in weights:
        close(aaw.grad.numpy(), taw.grad.numpy(), atol=1e-4)


def test_cov_edges_and_errors():
    ints = np.random.default_rng(17).integers(-9, 9, (3, 5))
    _same(ag.cov(ag.tensor(ints)), torch.cov(torch.tensor(ints)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.cov(torch.zeros(2, 1))
    with pytest.warns(UserWarning, match="degrees of freedom"):
        _same(ag.cov(ag.zeros(2, 1)), want)
    x = ag.ones(2, 3)
    with pytest.raises(ValueError):
        ag.cov(ag.zeros(2, 3, 4))
    with pytest.raises(ValueError):
        ag.cov(ag.tensor([[True, False]]))
    with pytest.raises(ValueError):
        ag.cov(x, fweights=ag.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError):
        ag.cov(x, fweights=ag.tensor([1, -2, 3]))
    with pytest.raises(ValueError):
        ag.cov(x, fweights=ag.tensor([1, 2]))
    with pytest.raises(ValueError):
        ag.cov(x, aweights=ag.tensor([1, 2, 3]))
    with pytest.raises(ValueError):
        ag.cov(x, aweights=ag.tensor([[1.0, 2.0, 3.0]]))
    with pytest.raises(ValueError):
        ag.cov(x, aweights=ag.tensor([1.0, -2.0, 3.0]))


@pytest.mark.parametrize("shape", [(5, 8), (2, 3), (7,)])
def test_corrcoef_matches_torch(shape):
    x = _data(shape, seed=18, nan=0)
    t, a = _pair(x, grad=True)
    t_out, a_out = torch.corrcoef(t), a.corrcoef()
    _same(a_out, t_out)
    _grads(t_out, a_out, t, a, atol=1e-4)
    constant = np.ones((2, 4), np.float32)
    constant[1] = [1, 2, 3, 5]
    _same(ag.corrcoef(ag.tensor(constant)), torch.corrcoef(torch.tensor(constant)))


# ------------------------------------------------------------------ msort / unique_consecutive
def test_msort_matches_torch():
    x = _data((7, 4, 3), seed=19)
    t, a = _pair(x, grad=True)
    t_out, a_out = torch.msort(t), a.msort()
    _same(a_out, t_out)
    _grads(torch.where(t_out.isnan(), 0.0, t_out), ag.where(a_out.isnan(), 0.0, a_out), t, a)
    out = ag.zeros(0)
    ag.msort(ag.tensor(x), out=out)
    _same(out, torch.msort(torch.tensor(x)))
    ints = np.random.default_rng(20).integers(-9, 9, (6, 5))
    _same(ag.msort(ag.tensor(ints)), torch.msort(torch.tensor(ints)))


@pytest.mark.parametrize("dim", [None, 0, 1, -1, 2])
def test_unique_consecutive_matches_torch(dim):
    rng = np.random.default_rng(21)
    x = rng.integers(0, 2, (5, 6, 3))
    x[1] = x[0]  # equal consecutive slices along dim 0
    x[:, 3] = x[:, 2]
    for flags in [(False, False), (True, False), (False, True), (True, True)]:
        keywords = {"return_inverse": flags[0], "return_counts": flags[1], "dim": dim}
        want = torch.unique_consecutive(torch.tensor(x), **keywords)
        got = ag.tensor(x).unique_consecutive(*flags, dim=dim)
        _check_all(got, want)
        _check_all(ag.unique_consecutive(ag.tensor(x), **keywords), want)


def _check_all(got, want):
    want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        _same(g, w)


def test_unique_consecutive_floats_and_edges():
    x = torch.tensor([1.0, NAN, NAN, 2.0, 2.0, INF, INF, -0.0, 0.0])
    for g, w in zip(ag.unique_consecutive(ag.tensor(x.numpy()), return_inverse=True, return_counts=True),
                    torch.unique_consecutive(x, return_inverse=True, return_counts=True)):
        _same(g, w)
    for shape, dim in [((0,), None), ((2, 0), 1), ((), None)]:
        want = torch.unique_consecutive(torch.zeros(shape), return_inverse=True, return_counts=True, dim=dim)
        got = ag.unique_consecutive(ag.zeros(shape), return_inverse=True, return_counts=True, dim=dim)
        for g, w in zip(got, want):
            _same(g, w)
    with pytest.raises(ValueError):
        ag.zeros(0, 3).unique_consecutive(dim=1)
    with pytest.raises(IndexError):
        ag.tensor(2.0).unique_consecutive(dim=0)
    with pytest.raises(IndexError):
        ag.zeros(2, 3).unique_consecutive(dim=2)


# ------------------------------------------------------------------ trapezoid and its kin
@pytest.mark.parametrize("op", ["trapezoid", "trapz", "cumulative_trapezoid"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_trapezoid_matches_torch(op, dim):
    y = _data((5, 7, 3), seed=22, nan=0)
    rng = np.random.default_rng(23)
    t, a = _pair(y, grad=True)
    n = y.shape[dim]
    points = np.sort(rng.uniform(0, 5, n)).astype(np.float32)
    grid = np.sort(rng.uniform(0, 5, y.shape), axis=dim).astype(np.float32)
    cases = [((), {}), ((), {"dx": 0.37}), ((points,), {}), ((grid,), {})]
    if dim != 0:
        cases.append(((grid[-1],), {}))  # x of fewer dims, broadcast from the left
    for args, kwargs in cases:
        tx, ax = _pair(args[0], grad=True) if args else (None, None)
        t_out = getattr(torch, op)(t, *((tx,) if args else ()), dim=dim, **kwargs)
        a_out = getattr(ag, op)(a, *((ax,) if args else ()), dim=dim, **kwargs)
        _same(a_out, t_out)
    t.grad = a.grad = None
    _grads(t_out, a_out, t, a)
    if args:
        close(ax.grad.numpy(), tx.grad.numpy(), atol=1e-4)


def test_trapezoid_integers_edges_and_errors():
    ints = np.array([[1, 2, 4], [3, -1, 0]])
    for op in ("trapezoid", "cumulative_trapezoid"):
        for kwargs in ({}, {"dx": 2}, {"dx": 0.5}):
            _same(getattr(ag, op)(ag.tensor(ints), **kwargs), getattr(torch, op)(torch.tensor(ints), **kwargs))
        _same(getattr(ag, op)(ag.tensor(ints), ag.tensor([0, 1, 3])),
              getattr(torch, op)(torch.tensor(ints), torch.tensor([0, 1, 3])))
        for shape in [(2, 0), (2, 1), (0, 3)]:
            _same(getattr(ag, op)(ag.zeros(shape)), getattr(torch, op)(torch.zeros(shape)))
        with pytest.raises(ValueError):
            getattr(ag, op)(ag.ones(3), ag.tensor([1.0, 2.0]))
        with pytest.raises(TypeError):
            getattr(ag, op)(ag.ones(3), ag.tensor([1.0, 2.0, 3.0]), dx=2)
        with pytest.raises(IndexError):
            getattr(ag, op)(ag.tensor(2.0))
        with pytest.raises(IndexError):
            getattr(ag, op)(ag.ones(2, 3), dim=2)
        with pytest.raises(ValueError):
            getattr(ag, op)(ag.tensor([True, False]))
    _same(ag.trapezoid(ag.zeros(2, 0, dtype=ag.int64)), torch.trapezoid(torch.zeros(2, 0, dtype=torch.int64)))


# ------------------------------------------------------------------ sum_to_size, where, dist
@pytest.mark.parametrize("size", [(1, 5, 1), (3, 1, 4), (5, 4), (1,), (4,), (3, 5, 4), (1, 1, 1)])
def test_sum_to_size_matches_torch(size):
    x = _data((3, 5, 4), seed=24, nan=0)
    t, a = _pair(x, grad=True)
    t_out, a_out = t.sum_to_size(size), a.sum_to_size(*size)
    _same(a_out, t_out)
    _same(a.sum_to_size(size), t_out)
    _grads(t_out, a_out, t, a)


def test_sum_to_size_integers_and_errors():
    ints = np.arange(12).reshape(3, 4)
    _same(ag.tensor(ints, dtype=ag.int32).sum_to_size(1, 4), torch.tensor(ints, dtype=torch.int32).sum_to_size(1, 4))
    for bad in [(3,), (2, 4), (1, 3, 4), (3, 4, 1)]:
        with pytest.raises(ValueError):
            ag.ones(3, 4).sum_to_size(*bad)


def test_where_and_dist_methods():
    x, y = _data((4, 5), seed=25, nan=0), _data((4, 5), seed=26, nan=0)
    cond = x > 0
    tx, ax = _pair(x, grad=True)
    ty, ay = _pair(y, grad=True)
    t_out, a_out = tx.where(torch.tensor(cond), ty), ax.where(ag.tensor(cond), ay)
    _same(a_out, t_out)
    _same(ax.where(ag.tensor(cond), 0.5), tx.where(torch.tensor(cond), 0.5))
    _grads(t_out, a_out, tx, ax)
    close(ay.grad.numpy(), ty.grad.numpy())
    for p in (1, 2, 3.5, INF, 0):
        _same(ag.tensor(x).dist(ag.tensor(y), p), torch.tensor(x).dist(torch.tensor(y), p))


def test_nanquantile_infinities():
    x = np.array([[1, INF, INF], [-INF, 1, INF], [NAN, -INF, 2]], np.float32)
    for interpolation in ("linear", "midpoint", "nearest"):
        for q in (0.0, 0.25, 0.5, 0.9, 1.0):
            _same(ag.tensor(x).nanquantile(q, 1, interpolation=interpolation),
                  torch.tensor(x).nanquantile(q, 1, interpolation=interpolation))


@pytest.mark.parametrize("kwargs", [{"bins": 7}, {"bins": 3, "range": (-1.0, 0.5)}, {"bins": 5, "density": True},
                                    {"bins": 4, "weight": True}, {"bins": 1}])
def test_histogram_matches_torch(kwargs):
    rng = np.random.default_rng(27)
    x = (rng.standard_normal((13, 23)) * 1.7).astype(np.float32)
    x[0, :3] = [-1.0, 0.5, 0.0]  # on the edges of the given range
    t_kw, a_kw = dict(kwargs), dict(kwargs)
    if kwargs.get("weight"):
        w = rng.uniform(0, 2, x.shape).astype(np.float32)
        t_kw["weight"], a_kw["weight"] = torch.tensor(w), ag.tensor(w)
    want = torch.histogram(torch.tensor(x), **t_kw)
    got = ag.tensor(x).histogram(**a_kw)
    _same(got.hist, want.hist)
    _same(got.bin_edges, want.bin_edges)
    edges = torch.tensor([-2.0, -0.5, 0.0, 0.25, 3.0])
    want = torch.histogram(torch.tensor(x), edges)
    hist, bin_edges = ag.zeros(0), ag.zeros(0)
    ag.histogram(ag.tensor(x), ag.tensor(edges.numpy()), out=(hist, bin_edges))
    _same(hist, want.hist)
    _same(bin_edges, want.bin_edges)


def test_histogram_edges_and_errors():
    for x in ([1.0, 1.0, 1.0], []):
        want = torch.histogram(torch.tensor(x), 3)
        got = ag.histogram(ag.tensor(x, dtype=ag.float32), 3)
        _same(got.hist, want.hist)
        _same(got.bin_edges, want.bin_edges)
    for bad in ([1.0, NAN, 3.0], [1.0, INF]):
        with pytest.raises(ValueError):
            ag.histogram(ag.tensor(bad), 2)
    with pytest.raises(ValueError):
        ag.histogram(ag.tensor([1.0, 2.0]), 2, range=(3.0, 1.0))
    with pytest.raises(ValueError):
        ag.histogram(ag.tensor([1.0, 2.0]), 0)
    with pytest.raises(ValueError):
        ag.histogram(ag.tensor([1, 2]), 2)
