"""mse_loss against numpy in float64, including the seed's numbers and 10^6 elements."""

import numpy as np


def test_mse_loss_seed_numbers(dev, upload, read):
    # The seed's test_backward_add: pred [5, 7, 9] against zeros -> 155/3.
    np.testing.assert_allclose(read(dev.mse_loss(upload([5.0, 7.0, 9.0]), upload([0.0, 0.0, 0.0]))),
                               [155.0 / 3.0], rtol=1e-6)


def test_mse_loss_small(dev, rng, upload, read):
    pred, target = rng.standard_normal((2, 37)).astype(np.float32)
    out = read(dev.mse_loss(upload(pred), upload(target)))
    assert out.shape == (1,)
    np.testing.assert_allclose(out, [np.mean((pred.astype(np.float64) - target) ** 2)], rtol=1e-5)


def test_mse_loss_million_elements(dev, rng, upload, read):
    n = 1_000_000
    pred = (rng.standard_normal(n) + 3.0).astype(np.float32)
    target = rng.standard_normal(n).astype(np.float32)
    expected = np.mean((pred.astype(np.float64) - target) ** 2)
    np.testing.assert_allclose(read(dev.mse_loss(upload(pred), upload(target))), [expected], rtol=1e-5)
