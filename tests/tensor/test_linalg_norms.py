"""torch.linalg.vector_norm / matrix_norm / norm and F.unfold / fold against torch on the
CPU: values and gradients (a zero vector's norm has a zero gradient, as torch's), errors."""

import math

import numpy as np
import pytest
import torch

import anygpu as ag

from .helper import check_pair
from .helper import torch_pair as both



@pytest.mark.parametrize("kwargs", [dict(), dict(ord=3, dim=1), dict(ord=1, dim=(0, 2), keepdim=True),
                                    dict(ord=math.inf, dim=-1), dict(ord=2.5, dim=(1, 2)), dict(ord=2, dim=0)])
def test_vector_norm(rng, kwargs):
    tx, ax = both(rng, 3, 4, 5)
    check_pair(rng, torch.linalg.vector_norm(tx, **kwargs), ag.linalg.vector_norm(ax, **kwargs), [tx], [ax])


@pytest.mark.parametrize("ord", [2, 3, 1])
def test_a_zero_vector_has_a_zero_gradient(ord):
    tx = torch.zeros(2, 4, requires_grad=True)
    ax = ag.zeros(2, 4, requires_grad=True)
    torch.linalg.vector_norm(tx, ord, dim=1).sum().backward()
    ag.linalg.vector_norm(ax, ord, dim=1).sum().backward()
    np.testing.assert_array_equal(ax.grad.numpy(), tx.grad.numpy())


@pytest.mark.parametrize("ord", ["fro", 1, -1, math.inf, -math.inf])
def test_matrix_norm(rng, ord):
    tx, ax = both(rng, 2, 4, 5)
    check_pair(rng, torch.linalg.matrix_norm(tx, ord), ag.linalg.matrix_norm(ax, ord), [tx], [ax])


@pytest.mark.parametrize("shape, kwargs", [((7,), dict()), ((4, 5), dict(ord="fro")), ((4, 5), dict(ord=1)),
                                           ((3, 4, 5), dict(dim=(0, 2))), ((3, 4), dict(ord=3, dim=1))])
def test_norm_dispatch(rng, shape, kwargs):
    tx, ax = both(rng, *shape)
    check_pair(rng, torch.linalg.norm(tx, **kwargs), ag.linalg.norm(ax, **kwargs), [tx], [ax])


def test_norm_errors():
    with pytest.raises(ValueError, match="singular values"):
        ag.linalg.matrix_norm(ag.ones(3, 3), "nuc")
    with pytest.raises(ValueError, match="needs dim"):
        ag.linalg.norm(ag.ones(2, 2, 2), ord=1)


@pytest.mark.parametrize("kwargs", [dict(kernel_size=3), dict(kernel_size=(2, 3), dilation=(2, 1), padding=(1, 2),
                                                               stride=(2, 3)), dict(kernel_size=2, stride=2)])
def test_unfold_and_fold(rng, kwargs):
    tx, ax = both(rng, 2, 3, 7, 8)
    t_cols = torch.nn.functional.unfold(tx, **kwargs)
    check_pair(rng, t_cols, ag.nn.Unfold(**kwargs)(ax), [tx], [ax])
    tc, ac = both(rng, *t_cols.shape)
    check_pair(rng, torch.nn.functional.fold(tc, (7, 8), **kwargs), ag.nn.Fold((7, 8), **kwargs)(ac), [tc], [ac])
    with pytest.raises(ValueError, match="fold"):
        ag.nn.functional.fold(ag.ones(2, 5, 4), (7, 8), 3)


@pytest.mark.parametrize("p, dim", [(2, None), ("fro", 1), (1, 0), (3, (0, 1)), (math.inf, 1)])
def test_tensor_norm_goes_through_vector_norm(rng, p, dim):
    tx, ax = both(rng, 4, 5)
    check_pair(rng, tx.norm(p, dim), ax.norm(p, dim), [tx], [ax])
    zero_t, zero_a = torch.zeros(4, requires_grad=True), ag.zeros(4, requires_grad=True)
    if p != math.inf:  # the largest magnitude of zeros: torch and anygpu spread the gradient differently
        zero_t.norm(p).backward()
        zero_a.norm(p).backward()
        np.testing.assert_array_equal(zero_a.grad.numpy(), zero_t.grad.numpy())
    with pytest.raises(ValueError, match="nuc"):
        ax.norm("nuc")
