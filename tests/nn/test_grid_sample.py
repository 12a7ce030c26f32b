"""F.affine_grid and F.grid_sample against torch on the CPU: values and gradients (input, grid,
theta) for every mode, padding mode and align_corners, on odd sizes with grids reaching past
the edges; bad arguments as ValueErrors."""

import contextlib

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import anygpu as ag
import anygpu.nn.functional as F


def _close(ours, theirs, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("align_corners", [False, True])
def test_affine_grid_matches_torch(align_corners):
    rng = np.random.default_rng(0)
    theta = rng.standard_normal((3, 2, 3)).astype(np.float32)
    w = rng.standard_normal((3, 5, 7, 2)).astype(np.float32)
    t = torch.tensor(theta, requires_grad=True)
    want = TF.affine_grid(t, (3, 2, 5, 7), align_corners=align_corners)
    (want * torch.tensor(w)).sum().backward()
    a = ag.tensor(theta, requires_grad=True)
    got = F.affine_grid(a, (3, 2, 5, 7), align_corners=align_corners)
    (got * ag.tensor(w)).sum().backward()
    _close(got, want)
    _close(a.grad, t.grad)
    with pytest.warns(UserWarning) if align_corners else contextlib.nullcontext():  # torch's unit-size note
        one = TF.affine_grid(torch.tensor(theta[:1]), (1, 1, 1, 1), align_corners=align_corners)
    _close(F.affine_grid(ag.tensor(theta[:1]), (1, 1, 1, 1), align_corners=align_corners), one)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_matches_torch(mode, padding_mode, align_corners):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    grid = rng.uniform(-1.6, 1.6, (2, 4, 6, 2)).astype(np.float32)  # some samples past the edges
    w = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    tx, tg = torch.tensor(x, dtype=torch.float64, requires_grad=True), torch.tensor(grid, dtype=torch.float64,
                                                                                    requires_grad=True)
    want = TF.grid_sample(tx, tg, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    (want * torch.tensor(w, dtype=torch.float64)).sum().backward()
    ax, ag_grid = ag.tensor(x, requires_grad=True), ag.tensor(grid, requires_grad=True)
    got = F.grid_sample(ax, ag_grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    (got * ag.tensor(w)).sum().backward()
    _close(got, want)
    _close(ax.grad, tx.grad)
    if mode == "nearest":  # the output does not depend on the grid: torch gives zeros, anygpu no gradient
        assert ag_grid.grad is None and not tg.grad.any()
    else:
        _close(ag_grid.grad, tg.grad, rtol=1e-3, atol=1e-4)


def test_grid_sample_identity_grid_returns_the_input_and_errors():
    x = np.random.default_rng(2).standard_normal((1, 2, 4, 6)).astype(np.float32)
    grid = F.affine_grid(ag.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]]), (1, 2, 4, 6), align_corners=False)
    np.testing.assert_allclose(F.grid_sample(ag.tensor(x), grid, align_corners=False).numpy(), x, atol=1e-5)
    with pytest.raises(ValueError, match="grid_sample: mode must be"):
        F.grid_sample(ag.tensor(x), grid, mode="bicubic")
    with pytest.raises(ValueError, match="grid_sample: padding_mode"):
        F.grid_sample(ag.tensor(x), grid, padding_mode="circular")
    with pytest.raises(ValueError, match=r"grid_sample: grid of shape \(1, Ho, Wo, 2\)"):
        F.grid_sample(ag.tensor(x), ag.zeros(1, 3, 3, 3))
    with pytest.raises(ValueError, match="affine_grid: theta of shape"):
        F.affine_grid(ag.zeros(2, 2, 3), (1, 1, 4, 4))
    with pytest.raises(ValueError, match="affine_grid: size must be"):
        F.affine_grid(ag.zeros(1, 2, 3), (1, 1, 4))
