"""linalg.det / slogdet / logdet / solve / inv (and torch.det, torch.inverse, Tensor.det ...) against
torch on the CPU: values and gradients for batches of random matrices whose elimination needs row
swaps, n from 1 to 9, vectors and several right-hand sides, broadcast batches; singular matrices
(det 0, slogdet (0, -inf), solve and inv refuse); bad shapes as ValueErrors."""

import numpy as np
import pytest
import torch

import anygpu as ag

from .helper import close


def _matrices(rng, shape):
    """Random matrices kept away from singular (a multiple of the identity added), their largest
    entries off the diagonal often enough that pivoting swaps rows."""
    n = shape[-1]
    return (rng.standard_normal(shape) + 0.5 * n * np.eye(n)[::-1]).astype(np.float32)


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 5, 5), (2, 3, 9, 9)])
def test_det_slogdet_logdet_match_torch(shape):
    rng = np.random.default_rng(0)
    data = _matrices(rng, shape)
    for name in ("det", "logdet"):
        t = torch.tensor(data, dtype=torch.float64, requires_grad=True)
        want = getattr(torch, name)(t)
        want.sum().backward() if name == "det" else torch.nan_to_num(want).sum().backward()
        a = ag.tensor(data, requires_grad=True)
        got = getattr(ag, name)(a)
        (got if name == "det" else ag.where(got.isnan(), 0.0, got)).sum().backward()
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=2e-4, atol=1e-5)
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=2e-3, atol=1e-4)
    sign, logabs = ag.linalg.slogdet(ag.tensor(data))
    tsign, tlogabs = torch.linalg.slogdet(torch.tensor(data, dtype=torch.float64))
    np.testing.assert_array_equal(sign.numpy(), tsign.numpy())
    close(logabs.numpy(), tlogabs.numpy())
    close(ag.tensor(data).det().numpy(), torch.tensor(data, dtype=torch.float64).det().numpy(), rtol=2e-4)


@pytest.mark.parametrize("a_shape,b_shape", [((4, 4), (4,)), ((3, 6, 6), (3, 6, 2)), ((2, 1, 5, 5), (3, 5, 4)),
                                             ((1, 1), (1, 3))])
def test_solve_matches_torch(a_shape, b_shape):
    rng = np.random.default_rng(1)
    a_data = _matrices(rng, a_shape)
    b_data = rng.standard_normal(b_shape).astype(np.float32)
    ta = torch.tensor(a_data, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(b_data, dtype=torch.float64, requires_grad=True)
    want = torch.linalg.solve(ta, tb)
    w = rng.standard_normal(tuple(want.shape)).astype(np.float32)
    (want * torch.tensor(w, dtype=torch.float64)).sum().backward()
    aa, ab = ag.tensor(a_data, requires_grad=True), ag.tensor(b_data, requires_grad=True)
    got = ag.linalg.solve(aa, ab)
    (got * ag.tensor(w)).sum().backward()
    assert got.shape == tuple(want.shape)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(aa.grad.numpy(), ta.grad.numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(ab.grad.numpy(), tb.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_inv_matches_torch_and_singular_matrices():
    rng = np.random.default_rng(2)
    data = _matrices(rng, (3, 7, 7))
    t = torch.tensor(data, dtype=torch.float64, requires_grad=True)
    torch.linalg.inv(t).pow(2).sum().backward()
    a = ag.tensor(data, requires_grad=True)
    got = ag.inverse(a)
    got.pow(2).sum().backward()
    np.testing.assert_allclose(got.numpy(), torch.linalg.inv(t).detach().numpy(), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=2e-3, atol=1e-4)
    np.testing.assert_allclose((ag.tensor(data) @ a.inverse()).numpy(), np.broadcast_to(np.eye(7), (3, 7, 7)),
                               atol=1e-4)
    singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.5, -1.0, 2.0]], np.float32)
    assert ag.det(ag.tensor(singular)).item() == 0.0
    sign, logabs = ag.slogdet(ag.tensor(singular))
    assert sign.item() == 0.0 and logabs.item() == -np.inf
    assert ag.logdet(ag.tensor(singular)).item() == -np.inf
    assert np.isnan(ag.logdet(ag.tensor(np.diag([-1.0, 2.0]).astype(np.float32))).item())
    for lib in (torch, ag):  # torch's LinAlgError, a RuntimeError
        with pytest.raises(RuntimeError, match="linalg.inv: The diagonal element .*is zero, the inversion could not "
                                               "be completed because the input matrix is singular"):
            lib.linalg.inv(lib.tensor(singular))
        with pytest.raises(RuntimeError, match="linalg.solve: The solver failed because the input matrix is singular"):
            lib.linalg.solve(lib.tensor(singular), lib.ones(3))
    with pytest.raises(ag.linalg.LinAlgError):
        ag.linalg.inv(ag.tensor(singular))


def test_float64_stays_float64_as_torch():
    rng = np.random.default_rng(5)
    data = _matrices(rng, (2, 4, 4))
    b = rng.standard_normal((2, 4, 3))
    for name, call in (("inv", lambda lib, a, b: lib.linalg.inv(a)), ("det", lambda lib, a, b: lib.linalg.det(a)),
                       ("solve", lambda lib, a, b: lib.linalg.solve(a, b)),
                       ("slogdet", lambda lib, a, b: lib.linalg.slogdet(a)[1])):
        want = call(torch, torch.tensor(data, dtype=torch.float64), torch.tensor(b, dtype=torch.float64))
        got = call(ag, ag.tensor(data, dtype=ag.float64), ag.tensor(b, dtype=ag.float64))
        assert str(got.dtype) == str(want.dtype) == "torch.float64", name
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12, err_msg=name)


def test_bad_shapes():
    with pytest.raises(ValueError, match=r"linalg.det: expected square matrices"):
        ag.linalg.det(ag.zeros(2, 3))
    with pytest.raises(ValueError, match=r"linalg.solve: B of shape"):
        ag.linalg.solve(ag.eye(3), ag.ones(4, 2))
    with pytest.raises(ValueError, match="linalg.inv: expected a float tensor"):
        ag.linalg.inv(ag.tensor([[1, 0], [0, 1]]))
