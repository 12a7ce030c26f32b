"""tensor/linalg_decomp.py against torch on the CPU: cholesky, qr, eigh, svd, pinv, lstsq,
matrix_rank, cond, solve_triangular, inv_ex, solve_ex, cholesky_solve, cholesky_inverse, the
small linalg functions and the legacy torch.* / Tensor forms. Values are compared through
quantities that do not depend on the sign (gauge) of singular and eigen vectors; gradients
of a weighted sum of such quantities against torch's autograd."""

import math

import numpy as np
import pytest
import torch

import anygpu as ag

RNG = np.random.default_rng(61)
DTYPES = {"f64": (np.float64, torch.float64, ag.float64, 1e-9), "f32": (np.float32, torch.float32, ag.float32, 2e-3)}


def _general(*shape):
    return RNG.standard_normal(shape)


def _spd(*shape):
    a = RNG.standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def _sym(*shape):
    a = RNG.standard_normal(shape)
    return a + np.swapaxes(a, -1, -2)


def _tri(*shape, upper=False):
    a = RNG.uniform(-1, 1, shape) + 3 * np.eye(shape[-1])
    return np.triu(a) if upper else np.tril(a)


def check(fn, arrays, dtype, grad=True, tol=None):
    """fn(m, *tensors) -> tensor or tuple on torch and anygpu: values, then the gradients of
    sum(out * w) for fixed random w."""
    np_dt, t_dt, a_dt, default_tol = DTYPES[dtype]
    tol = default_tol if tol is None else tol
    arrays = [np.asarray(a, np_dt) for a in arrays]
    ts = [torch.tensor(a, dtype=t_dt, requires_grad=grad) for a in arrays]
    xs = [ag.tensor(a, dtype=a_dt, requires_grad=grad) for a in arrays]
    t_out, a_out = fn(torch, *ts), fn(ag, *xs)
    t_out = t_out if isinstance(t_out, tuple) else (t_out,)
    a_out = a_out if isinstance(a_out, tuple) else (a_out,)
    assert len(t_out) == len(a_out)
    for t, a in zip(t_out, a_out):
        assert tuple(a.shape) == tuple(t.shape)
        assert a.dtype is a_dt
        np.testing.assert_allclose(a.numpy(), t.detach().numpy(), rtol=tol, atol=tol)
    if not grad:
        return
    weights = [RNG.standard_normal(t.shape) for t in t_out]
    t_loss = sum((t * torch.tensor(w, dtype=t_dt)).sum() for t, w in zip(t_out, weights))
    a_loss = sum((a * ag.tensor(w, dtype=a_dt)).sum() for a, w in zip(a_out, weights))
    t_loss.backward()
    a_loss.backward()
    for t, a in zip(ts, xs):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=10 * tol, atol=10 * tol)


def _abs_cols(U):
    """U's entries squared: they do not see the sign of a column (or row), a gauge-free form."""
    return U * U


SHAPES = [(3, 5), (5, 3), (2, 4, 4), (2, 1, 3, 2)]


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (1, 1)])
def test_cholesky(dtype, upper, shape):
    check(lambda m, a: m.linalg.cholesky(a, upper=upper), [_spd(*shape)], dtype)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_cholesky_ex_and_legacy(dtype):
    a = _spd(2, 4, 4)
    check(lambda m, x: m.linalg.cholesky_ex(x).L, [a], dtype)
    check(lambda m, x: m.cholesky(x, upper=True), [a], dtype)
    check(lambda m, x: x.cholesky(), [a], dtype)


def test_cholesky_not_pd():
    a = np.array([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]], np.float32)
    with pytest.raises(torch.linalg.LinAlgError) as t_err:
        torch.linalg.cholesky(torch.tensor(a))
    with pytest.raises(ag.linalg.LinAlgError, match=r"leading minor of order 2 is not positive-definite") as a_err:
        ag.linalg.cholesky(ag.tensor(a))
    assert str(a_err.value) == str(t_err.value)
    assert isinstance(a_err.value, RuntimeError)
    L, info = ag.linalg.cholesky_ex(ag.tensor(np.stack([np.eye(3), a])))
    t_info = torch.linalg.cholesky_ex(torch.tensor(np.stack([np.eye(3), a]))).info
    assert info.dtype is ag.int32 and info.tolist() == t_info.tolist()


@pytest.mark.parametrize("op", ["cholesky", "qr", "eigh", "svd", "eigvalsh", "svdvals"])
def test_shape_errors(op):
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        getattr(ag.linalg, op)(ag.randn(3))
    if op in ("cholesky", "eigh", "eigvalsh"):
        with pytest.raises(RuntimeError, match="square matrices, but they are 3 by 4"):
            getattr(ag.linalg, op)(ag.randn(3, 4))


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES)
def test_qr_reduced(dtype, shape):
    # Q R and R's diagonal magnitudes are gauge free; Q^T of a fixed vector squared too
    def fn(m, a):
        Q, R = m.linalg.qr(a)
        return Q @ R, R.diagonal(0, -2, -1).abs(), _abs_cols(Q), _abs_cols(R)
    check(fn, [_general(*shape)], dtype)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_qr_modes(dtype):
    a = _general(5, 3)
    check(lambda m, x: _abs_cols(m.linalg.qr(x, mode="complete").Q), [a], dtype, grad=False)
    check(lambda m, x: _abs_cols(m.linalg.qr(x, mode="r").R), [a], dtype, grad=False)
    check(lambda m, x: _abs_cols(m.linalg.qr(x[..., :3, :], mode="complete").Q), [a], dtype)
    check(lambda m, x: _abs_cols(m.qr(x, some=False)[0]), [a], dtype, grad=False)
    check(lambda m, x: _abs_cols(x.qr()[1]), [a], dtype)
    with pytest.raises(RuntimeError, match="unrecognized mode 'bad'"):
        ag.linalg.qr(ag.randn(3, 3), mode="bad")
    x = ag.tensor(a, requires_grad=True)
    with pytest.raises(RuntimeError, match="mode='r'"):
        ag.linalg.qr(x, mode="r").R.sum().backward()


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("uplo", ["L", "U"])
@pytest.mark.parametrize("shape", [(4, 4), (2, 3, 3), (5, 5)])
def test_eigh(dtype, uplo, shape):
    # the input is made symmetric inside so the gradient is the symmetric one both ways
    def fn(m, a):
        s = a + a.mT
        L, V = m.linalg.eigh(s, UPLO=uplo)
        return L, _abs_cols(V), m.linalg.eigvalsh(s, UPLO=uplo)
    check(fn, [_general(*shape)], dtype, tol=None if dtype == "f64" else 5e-3)


def test_eigh_reads_one_triangle():
    a = _general(4, 4)
    for uplo in "LU":
        t = torch.linalg.eigvalsh(torch.tensor(a), UPLO=uplo).numpy()
        np.testing.assert_allclose(ag.linalg.eigvalsh(ag.tensor(a, dtype=ag.float64), UPLO=uplo).numpy(), t,
                                   rtol=1e-10, atol=1e-10)
    with pytest.raises(RuntimeError, match="UPLO argument to be 'L' or 'U', but got X"):
        ag.linalg.eigh(ag.randn(3, 3), UPLO="X")


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("full", [False, True])
def test_svd(dtype, shape, full):
    def fn(m, a):
        U, S, Vh = m.linalg.svd(a, full_matrices=full)
        k = S.shape[-1]
        recon = (U[..., :k] * S.unsqueeze(-2)) @ Vh[..., :k, :]
        return recon, S, _abs_cols(U[..., :k]), _abs_cols(Vh[..., :k, :]), m.linalg.svdvals(a)
    check(fn, [_general(*shape)], dtype)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_svd_legacy(dtype):
    a = _general(2, 5, 3)
    check(lambda m, x: (lambda r: (_abs_cols(r[0]), r[1], _abs_cols(r[2])))(m.svd(x)), [a], dtype)
    check(lambda m, x: (lambda r: (_abs_cols(r[0]), r[1], _abs_cols(r[2])))(x.svd(some=False)), [a], dtype,
          grad=False)
    check(lambda m, x: tuple(m.svd(x, compute_uv=False)), [a], dtype, grad=False)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("shape", SHAPES)
def test_pinv(dtype, shape):
    check(lambda m, a: m.linalg.pinv(a), [_general(*shape)], dtype)
    check(lambda m, a: m.pinverse(a), [_general(*shape)], dtype)


def test_pinv_cuts_and_hermitian():
    a = np.diag([3.0, 1.0, 1e-3, 0.0])
    for kw in ({}, {"rtol": 1e-2}, {"atol": 0.5}, {"hermitian": True}, {"hermitian": True, "atol": 2.0}):
        np.testing.assert_allclose(ag.linalg.pinv(ag.tensor(a, dtype=ag.float64), **kw).numpy(),
                                   torch.linalg.pinv(torch.tensor(a), **kw).numpy(), rtol=1e-12, atol=1e-12)
        assert ag.linalg.matrix_rank(ag.tensor(a), **kw).tolist() == torch.linalg.matrix_rank(torch.tensor(a),
                                                                                                **kw).tolist()
    check(lambda m, x: m.linalg.pinv(x + x.mT, hermitian=True), [_general(2, 4, 4)], "f64")


def test_matrix_rank():
    a = _general(3, 5, 2) @ _general(3, 2, 4)
    r = ag.linalg.matrix_rank(ag.tensor(a))
    assert r.dtype is ag.int64 and r.tolist() == torch.linalg.matrix_rank(torch.tensor(a)).tolist() == [2, 2, 2]
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        ag.linalg.matrix_rank(ag.randn(3))


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("shapes", [((5, 3), (5, 2)), ((2, 6, 4), (2, 6, 3)), ((4, 4), (4,)), ((3, 5), (3, 2))])
def test_lstsq(dtype, shapes):
    a, b = _general(*shapes[0]), _general(*shapes[1])
    check(lambda m, x, y: m.linalg.lstsq(x, y).solution, [a, b], dtype)
    r_t = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b))
    r_a = ag.linalg.lstsq(ag.tensor(a), ag.tensor(b))
    for name in ("residuals", "rank", "singular_values"):
        assert tuple(getattr(r_a, name).shape) == tuple(getattr(r_t, name).shape)
    assert r_a.rank.tolist() == r_t.rank.tolist()


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("p", [None, 2, -2, "fro", "nuc", 1, -1, math.inf, -math.inf])
def test_cond(dtype, p):
    a = _general(2, 4, 4) + 3 * np.eye(4)
    # torch's own backward of cond(p='fro') fails (its inverse is modified in place), so not compared
    check(lambda m, x: m.linalg.cond(x, p), [a], dtype, grad=p in (None, 2, -2, "nuc"))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        ag.linalg.cond(ag.randn(3))


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(dtype, upper, left, unit):
    a = _general(2, 4, 4) + 3 * np.eye(4)  # the other triangle is ignored
    b = _general(2, 4, 3) if left else _general(2, 3, 4)
    check(lambda m, x, y: m.linalg.solve_triangular(x, y, upper=upper, left=left, unitriangular=unit),
          [a, b], dtype)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_triangular_solve_legacy(dtype):
    a, b = _tri(4, 4, upper=True), _general(2, 4, 3)
    check(lambda m, y, x: tuple(m.triangular_solve(y, x)), [b, a], dtype)
    check(lambda m, y, x: tuple(y.triangular_solve(x.mT, upper=False, transpose=True)), [b, a], dtype)
    check(lambda m, y, x: m.triangular_solve(y, x, unitriangular=True).solution, [b, a], dtype)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_inv_ex_solve_ex(dtype):
    a = _general(2, 4, 4) + 3 * np.eye(4)
    check(lambda m, x: m.linalg.inv_ex(x).inverse, [a], dtype)
    check(lambda m, x, y: m.linalg.solve_ex(x, y).result, [a, _general(2, 4, 3)], dtype)
    check(lambda m, x, y: m.linalg.solve_ex(x, y).result, [a, _general(4)], dtype)
    check(lambda m, x, y: m.linalg.solve_ex(x, y, left=False).result, [a, _general(3, 4)], dtype)
    singular = np.stack([np.eye(3), np.zeros((3, 3))])
    assert ag.linalg.inv_ex(ag.tensor(singular)).info.tolist() == [0, 1]
    assert torch.linalg.inv_ex(torch.tensor(singular)).info.tolist() == [0, 1]
    with pytest.raises(ag.linalg.LinAlgError, match="singular"):
        ag.linalg.inv_ex(ag.tensor(singular), check_errors=True)
    with pytest.raises(ag.linalg.LinAlgError, match="singular"):
        ag.linalg.solve_ex(ag.tensor(singular), ag.ones(2, 3), check_errors=True)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_inverse(dtype, upper):
    spd = _spd(2, 4, 4)
    fac = np.linalg.cholesky(spd)
    fac = np.swapaxes(fac, -1, -2) if upper else fac
    check(lambda m, y, f: m.cholesky_solve(y, f, upper=upper), [_general(2, 4, 3), fac], dtype)
    check(lambda m, y, f: y.cholesky_solve(f, upper), [_general(4, 2), fac[0]], dtype)
    check(lambda m, f: m.cholesky_inverse(f, upper=upper), [fac], dtype)
    check(lambda m, f: f.cholesky_inverse(upper), [fac[1]], dtype)


@pytest.mark.parametrize("dtype", ["f64", "f32"])
def test_small_ones(dtype):
    check(lambda m, a, b, c: m.linalg.multi_dot([a, b, c]), [_general(3), _general(3, 4), _general(4, 2)], dtype)
    check(lambda m, a, b: m.linalg.multi_dot([a, b]), [_general(2, 3), _general(3)], dtype)
    check(lambda m, a, b: m.linalg.matmul(a, b), [_general(2, 3, 4), _general(4, 5)], dtype)
    check(lambda m, a, b: m.linalg.cross(a, b), [_general(4, 3), _general(1, 3)], dtype)
    check(lambda m, a: m.linalg.diagonal(a, offset=1), [_general(2, 3, 4)], dtype)
    check(lambda m, a, b: m.linalg.vecdot(a, b, dim=0), [_general(3, 4), _general(3, 4)], dtype)
    check(lambda m, a: m.linalg.vander(a), [_general(2, 4)], dtype)
    check(lambda m, a: m.linalg.vander(a, N=2), [_general(3)], dtype)
    check(lambda m, a: m.linalg.matrix_power(a, 3), [_general(2, 3, 3)], dtype)
    check(lambda m, a: m.linalg.matrix_power(a, -2), [_general(3, 3) + 3 * np.eye(3)], dtype)
    with pytest.raises(RuntimeError, match="at least 2 tensors"):
        ag.linalg.multi_dot([ag.randn(2, 2)])
    with pytest.raises(RuntimeError, match="must have length 3"):
        ag.linalg.cross(ag.randn(3, 4), ag.randn(3, 4))
    with pytest.raises(ag.linalg.LinAlgError):
        ag.linalg.matrix_power(ag.zeros(3, 3), -1)


def test_float16_forward():
    a = _spd(3, 3).astype(np.float16)
    L = ag.linalg.cholesky(ag.tensor(a))
    assert L.dtype is ag.float16
    np.testing.assert_allclose(L.numpy().astype(np.float64),
                               torch.linalg.cholesky(torch.tensor(a, dtype=torch.float32)).numpy(), rtol=1e-2,
                               atol=1e-2)


def test_errors_as_torch():
    batch = np.stack([np.eye(3), -np.eye(3)])
    with pytest.raises(RuntimeError) as t_err:
        torch.linalg.cholesky(torch.tensor(batch))
    with pytest.raises(ag.linalg.LinAlgError) as a_err:
        ag.linalg.cholesky(ag.tensor(batch))
    assert str(a_err.value) == str(t_err.value)
    nan = np.full((3, 3), np.nan)
    for op in ("svd", "svdvals", "pinv", "matrix_rank", "eigh", "eigvalsh"):
        with pytest.raises(torch.linalg.LinAlgError):
            getattr(torch.linalg, op)(torch.tensor(nan))
        with pytest.raises(ag.linalg.LinAlgError, match="failed to converge"):
            getattr(ag.linalg, op)(ag.tensor(nan))
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as input. Got Long"):
        ag.linalg.cholesky(ag.tensor([[1, 2], [3, 4]]))
