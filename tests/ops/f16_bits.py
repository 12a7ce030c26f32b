"""Bit-exact comparisons of f16/f32 results (the cast tests: test_foreach_cast.py,
test_fusion_cast_batch.py)."""

from __future__ import annotations

import numpy as np
import pytest


def needs_f16(dev) -> None:
    if not dev.supports("f16"):
        pytest.skip("no shader-f16 on this adapter")


def same(got: np.ndarray, want: np.ndarray, msg: str) -> None:
    """Equal bits; a NaN stays a NaN (its sign and payload are the GPU's)."""
    assert got.dtype == want.dtype, msg
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=msg)
    bits = np.uint16 if got.dtype == np.float16 else np.uint32
    np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits), err_msg=msg)
