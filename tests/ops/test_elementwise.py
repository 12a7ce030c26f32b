"""The seed's elementwise ops and their backward kernels against numpy and torch."""

import numpy as np
import pytest
import torch

UNARY_REFERENCES = {
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "swish": lambda x: x / (1 + np.exp(-x)),
    "tanh_act": np.tanh,
}


@pytest.mark.parametrize("name", UNARY_REFERENCES)
def test_unary_ops(dev, rng, upload, read, close, name):
    x = (rng.standard_normal(1037) * 4).astype(np.float32)
    close(read(getattr(dev, name)(upload(x))), UNARY_REFERENCES[name](x.astype(np.float64)))


def test_tanh_act_saturates_without_nan(dev, upload, read):
    out = read(dev.tanh_act(upload([-1e4, -50.0, 50.0, 1e4])))
    np.testing.assert_allclose(out, [-1, -1, 1, 1], rtol=1e-6)


def test_scale(dev, rng, upload, read, close):
    x = rng.standard_normal(515).astype(np.float32)
    close(read(dev.scale(upload(x), -2.5)), x * -2.5)


@pytest.mark.parametrize("name, reference", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply)])
def test_binary_ops(dev, rng, upload, read, close, name, reference):
    a, b = rng.standard_normal((2, 777)).astype(np.float32)
    close(read(getattr(dev, name)(upload(a), upload(b))), reference(a, b))


BACKWARD_CASES = {
    # name: (torch forward, whether the kernel takes the forward input x or output y)
    "relu_backward": (torch.relu, "x"),
    "sigmoid_backward": (torch.sigmoid, "y"),
    "swish_backward": (lambda t: t * torch.sigmoid(t), "x"),
    "tanh_backward": (torch.tanh, "y"),
}


@pytest.mark.parametrize("name", BACKWARD_CASES)
def test_backward_kernels_match_torch_autograd(dev, rng, upload, read, close, vjp, name):
    forward, takes = BACKWARD_CASES[name]
    x = (rng.standard_normal(999) * 3).astype(np.float32)
    x[np.abs(x) < 1e-3] = 0.5  # relu's derivative is undefined at 0
    grad = rng.standard_normal(999).astype(np.float32)
    y, (expected,) = vjp(forward, [x], grad)
    saved = x if takes == "x" else y.astype(np.float32)
    close(read(getattr(dev, name)(upload(grad), upload(saved))), expected, atol=1e-5)


def test_elementwise_past_65535_workgroups(dev, upload, read):
    """65535*256 + 1000 elements need a folded 2-D grid; the tail must be computed too."""
    n = 65535 * 256 + 1000
    x = np.arange(n, dtype=np.float32) % 1021 - 510
    out = read(dev.scale(upload(x), 2.0))
    np.testing.assert_array_equal(out[-5000:], 2 * x[-5000:])
    np.testing.assert_array_equal(out[::4099], 2 * x[::4099])
