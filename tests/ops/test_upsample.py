"""upsample_nearest2d and its backward against torch."""

import numpy as np
import pytest
import torch.nn.functional as F


@pytest.mark.parametrize("batch, channels, in_h, in_w, scale_h, scale_w", [(2, 3, 4, 5, 2, 2), (1, 2, 3, 3, 3, 1)])
def test_upsample_nearest2d_and_backward(dev, rng, upload, read, close, vjp,
                                         batch, channels, in_h, in_w, scale_h, scale_w):
    x = rng.standard_normal((batch, channels, in_h, in_w)).astype(np.float32)
    grad = rng.standard_normal((batch, channels, in_h * scale_h, in_w * scale_w)).astype(np.float32)
    expected, (expected_grad,) = vjp(
        lambda t: F.interpolate(t, scale_factor=(scale_h, scale_w), mode="nearest"), [x], grad)
    out = dev.upsample_nearest2d(upload(x), batch, channels, in_h, in_w, scale_h, scale_w)
    np.testing.assert_array_equal(read(out, expected.shape), expected.astype(np.float32))
    back = dev.upsample_nearest2d_backward(upload(grad), batch, channels, in_h, in_w, scale_h, scale_w)
    close(read(back, x.shape), expected_grad)
