"""Fixtures for checking Layer-0 ops against torch on the CPU: the oracle helpers of
tests/tensor/helper.py (one `close`, one `torch_vjp`) and Buffer upload/read.

All are stateless, so they are session-scoped (hypothesis tests may use them too)."""

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tensor.helper import close as oracle_close  # noqa: E402  (the one torch-oracle helper)
from tensor.helper import torch_vjp  # noqa: E402


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


@pytest.fixture(scope="session")
def vjp():
    return torch_vjp


@pytest.fixture(scope="session")
def close():
    """tensor/helper.py's close: float32-sized tolerances, atol scaled to the data."""
    return oracle_close
