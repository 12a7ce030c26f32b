"""group_norm forward and backward against torch."""

import numpy as np
import pytest
import torch.nn.functional as F

# (batch, channels, spatial, groups): images, one group (LayerNorm-like), one channel
# per group (InstanceNorm-like), and spatial 1 (LayerNorm over a last axis).
CASES = [(2, 6, 25, 3), (3, 4, 49, 1), (2, 5, 300, 5), (4, 37, 1, 1), (1, 8, 7, 2)]


@pytest.mark.parametrize("batch, channels, spatial, groups", CASES)
def test_group_norm_forward_and_backward(dev, rng, upload, read, close, vjp, batch, channels, spatial, groups):
    eps = 1e-5
    # A large offset beside a small spread: E[x^2] - E[x]^2 would lose the variance.
    x = (rng.standard_normal((batch, channels, spatial)) * 0.5 + 30.0).astype(np.float32)
    gamma = rng.standard_normal(channels).astype(np.float32)
    beta = rng.standard_normal(channels).astype(np.float32)
    grad = rng.standard_normal((batch, channels, spatial)).astype(np.float32)
    expected, (gx, ggamma, gbeta) = vjp(lambda x_, g_, b_: F.group_norm(x_, groups, g_, b_, eps),
                                        [x, gamma, beta], grad)
    y = dev.group_norm(upload(x), upload(gamma), upload(beta), batch, channels, spatial, groups, eps)
    close(read(y, x.shape), expected, rtol=1e-3, atol=1e-3)
    dx, dgamma, dbeta = dev.group_norm_backward(upload(grad), upload(x), upload(gamma),
                                                batch, channels, spatial, groups, eps)
    close(read(dx, x.shape), gx, rtol=1e-3, atol=2e-3)
    close(read(dgamma), ggamma, rtol=1e-3, atol=2e-3)
    close(read(dbeta), gbeta)


@pytest.mark.parametrize("scale", [1e30, 1e-20])
def test_group_norm_backward_at_extreme_scales(dev, rng, upload, read, vjp, scale):
    """The backward recomputes the forward's statistics (deviations scaled by the largest
    before squaring), so at 1e30, where the squares overflow float32, its gradients are
    still finite and right; the float64 torch gradient is the oracle."""
    batch, channels, spatial, groups, eps = 2, 4, 9, 2, 1e-5
    x = (rng.standard_normal((batch, channels, spatial)) * scale).astype(np.float32)
    gamma = rng.standard_normal(channels).astype(np.float32)
    beta = rng.standard_normal(channels).astype(np.float32)
    grad = rng.standard_normal((batch, channels, spatial)).astype(np.float32)
    _, expected = vjp(lambda x_, g_, b_: F.group_norm(x_, groups, g_, b_, eps), [x, gamma, beta], grad)
    grads = dev.group_norm_backward(upload(grad), upload(x), upload(gamma), batch, channels, spatial, groups, eps)
    for ours, theirs in zip(grads, expected):
        ours = read(ours, theirs.shape)
        assert np.isfinite(ours).all()
        np.testing.assert_allclose(ours, theirs, rtol=2e-3, atol=2e-3 * np.abs(theirs).max())
