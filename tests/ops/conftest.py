"""Helpers for checking Layer-0 ops against an independent reference (torch on the CPU).

All are stateless, so they are session-scoped (hypothesis tests may use them too)."""

import numpy as np
import pytest
import torch


@pytest.fixture(scope="session")
def upload(dev):
    """numpy/list -> float32 Buffer."""
    return lambda array: dev.upload(np.asarray(array, dtype=np.float32))


@pytest.fixture(scope="session")
def read(dev):
    """Buffer -> numpy float32 array of the given shape (flat when no shape)."""
    def _read(buf, shape=None):
        values = dev.read(buf)
        return values if shape is None else values.reshape(shape)
    return _read


def torch_vjp(fn, inputs, grad_out):
    """Run fn on torch copies of `inputs` (numpy arrays, or None passed through) and
    backpropagate grad_out: returns (output, [gradient of each input or None])."""
    tensors = [None if x is None else torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs]
    out = fn(*tensors)
    out.backward(torch.tensor(grad_out, dtype=torch.float64))
    grads = [None if t is None else t.grad.numpy() for t in tensors]
    return out.detach().numpy(), grads


@pytest.fixture(scope="session")
def vjp():
    return torch_vjp


@pytest.fixture(scope="session")
def close():
    """assert_allclose with float32-sized default tolerances, scaled to the data."""
    def _close(actual, expected, rtol=1e-4, atol=None):
        expected = np.asarray(expected)
        if atol is None:
            atol = 1e-5 * max(1.0, float(np.abs(expected).max(initial=0.0)))
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)
    return _close
