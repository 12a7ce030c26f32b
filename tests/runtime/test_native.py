"""Dispatches encoded by direct C calls (runtime/native.py): same results as wgpu-py's
methods, errors still raised as GpuError, and the device keeps working after one."""

import numpy as np
import pytest

from anygpu.runtime import native
from anygpu.runtime.errors import GpuError


def test_raw_calls_are_used_and_give_the_same_results(dev, rng):
    assert native.AVAILABLE and dev._raw_calls
    data = rng.standard_normal(1003).astype(np.float32)
    x = dev.upload(data)
    for _ in range(300):  # more than one batch (MAX_PENDING)
        x = dev.scale(x, 1.01)
    np.testing.assert_allclose(dev.read(x), data.astype(np.float64) * 1.01 ** 300, rtol=1e-4)


def test_raw_and_method_encoding_agree(dev, rng):
    a = dev.upload(rng.standard_normal(517).astype(np.float32))
    b = dev.upload(rng.standard_normal(517).astype(np.float32))
    want = dev.read(dev.mul(dev.add(a, b), b))
    dev._raw_calls = False
    try:
        got = dev.read(dev.mul(dev.add(a, b), b))
    finally:
        dev._raw_calls = True
    np.testing.assert_array_equal(got, want)


def _mismatched_dispatch(dev, rng):
    """A pending dispatch whose bind group does not fit its pipeline's layout."""
    x = dev.upload(rng.standard_normal(64).astype(np.float32))
    y = dev.scale(x, 2.0)  # one input, one output
    z = dev.add(x, y)  # two inputs, one output
    dev.flush()
    scaled = dev.scale(x, 3.0)
    dev.realize_lazy()  # elementwise ops are deferred (ops/fusion.py): record them now
    pending_scale = dev._pending.pop()
    added = dev.add(x, y)
    dev.realize_lazy()
    pending_add = dev._pending.pop()
    del scaled, added
    # The scale pipeline with the add's bind group (its layout has one more binding).
    bad = ("dispatch", pending_scale[1], pending_add[2], 0, (1, 1, 1), pending_scale[5], pending_add[6])
    dev._pending.append(bad)
    dev._n_params = max(dev._n_params, 1)
    return x, z


def test_an_invalid_raw_dispatch_raises_gpu_error_and_the_device_recovers(dev, rng):
    x, _ = _mismatched_dispatch(dev, rng)
    with pytest.raises(GpuError):
        dev.flush()
    assert not dev._pending
    data = rng.standard_normal(99).astype(np.float32)
    np.testing.assert_allclose(dev.read(dev.scale(dev.upload(data), 2.0)), 2 * data, rtol=1e-6)


def test_captured_turns_reported_errors_into_gpu_error():
    with pytest.raises(GpuError, match="Validation|boom"):
        with native.Captured("test adapter"):
            native._error_handler.handle_error("Validation", "boom")
    with native.Captured("test adapter"):  # nothing reported: nothing raised
        pass
