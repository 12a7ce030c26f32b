"""Empty tensors and non-finite values behave as in torch."""

import numpy as np
import torch

import anygpu as ag


def test_empty_reductions_match_torch():
    empty = np.zeros((0, 3), np.float32)
    assert ag.tensor(empty).sum().item() == torch.tensor(empty).sum().item() == 0.0
    assert np.isnan(ag.tensor(empty).mean().item()) and torch.tensor(empty).mean().isnan()
    np.testing.assert_array_equal(ag.tensor(empty).mean(0).numpy(), torch.tensor(empty).mean(0).numpy())


def test_empty_matmul_shapes_and_zero_inner_size():
    assert (ag.zeros(0, 3) @ ag.ones(3, 4)).shape == (0, 4)
    assert (ag.zeros(5, 0, 3) @ ag.ones(3, 2)).shape == (5, 0, 2)
    out = ag.zeros(2, 0) @ ag.zeros(0, 3)
    np.testing.assert_array_equal(out.numpy(), np.zeros((2, 3), np.float32))


def test_non_finite_values_propagate_like_torch():
    values = np.array([np.nan, np.inf, -np.inf, -1.0, 2.0], np.float32)
    for name in ("relu", "sigmoid", "tanh", "exp", "abs"):
        ours = getattr(ag.tensor(values), name)().numpy()
        theirs = getattr(torch.tensor(values), name)().numpy()
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs), err_msg=name)
        finite = ~np.isnan(theirs)
        np.testing.assert_allclose(ours[finite], theirs[finite], rtol=1e-6, err_msg=name)
    assert np.isnan(ag.tensor(values).sum().item())
