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


# (rows, cols): one row; chunks of several rows (rows > 2048) with a short last chunk; columns
# that do not fill the 64 threads; the widest the chunked kernel serves; wider (one-row kernel).
LN_CASES = [(1, 7), (37, 50), (4099, 67), (2500, 1024), (3, 1100)]


@pytest.mark.parametrize("rows, cols", LN_CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_matches_torch(dev, rng, upload, read, close, vjp, monkeypatch, rows, cols, affine):
    """ops/layernorm.layer_norm_backward: grad_x and the affine gradients (the chunked kernel's
    per-chunk partial sums, summed once, for cols <= 1024) against float64 torch."""
    from anygpu.ops import layernorm
    x = (rng.standard_normal((rows, cols)) * 2.0 + 3.0).astype(np.float32)
    gamma = rng.standard_normal(cols).astype(np.float32)
    beta = rng.standard_normal(cols).astype(np.float32)
    grad = rng.standard_normal((rows, cols)).astype(np.float32)
    if affine:
        _, (gx, ggamma, gbeta) = vjp(lambda x_, g_, b_: F.layer_norm(x_, (cols,), g_, b_), [x, gamma, beta], grad)
    else:
        _, (gx,) = vjp(lambda x_: F.layer_norm(x_, (cols,)), [x], grad)
    _, stats = dev.layer_norm(upload(x), upload(gamma) if affine else None, upload(beta) if affine else None,
                              rows, cols)
    chunked = []
    real = layernorm._backward_chunks
    monkeypatch.setattr(layernorm, "_backward_chunks", lambda *a: chunked.append(a[-1]) or real(*a))
    dx, dgamma, dbeta = layernorm.layer_norm_backward(dev, upload(grad), upload(x), upload(gamma) if affine else None,
                                                      stats, rows, cols, want_affine=affine)
    close(read(dx, x.shape), gx, rtol=1e-3, atol=2e-3)
    if affine:
        close(read(dgamma), ggamma, rtol=1e-4, atol=1e-4 * np.abs(ggamma).max())
        close(read(dbeta), gbeta, rtol=1e-4, atol=1e-4 * np.abs(gbeta).max())
        assert chunked == ([cols] if cols <= 1024 else [])
    else:
        assert dgamma is None and dbeta is None and chunked == []
