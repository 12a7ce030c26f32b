"""Bind groups made by one direct C call (runtime/device.py `_RawBindGroups`): the groups
work as wgpu-py's do, and a call that reports an error falls back to wgpu-py's method, so
the error is raised as before and the device keeps working."""

import numpy as np
import pytest

from anygpu.runtime import device as device_mod


def _fresh_groups(dev):
    dev.flush()
    dev._bind_groups.clear()  # every launch below makes its group


def test_raw_groups_give_the_same_results_as_wgpu_py_groups(dev, rng):
    assert dev._raw_groups is not None
    a_np = rng.standard_normal(1003).astype(np.float32)
    b_np = rng.standard_normal(1003).astype(np.float32)
    a, b = dev.upload(a_np), dev.upload(b_np)
    _fresh_groups(dev)
    made = len(dev._bind_groups)
    raw = dev.read(dev.mul(dev.add(a, b), b))
    assert len(dev._bind_groups) > made
    np.testing.assert_allclose(raw, (a_np + b_np) * b_np, rtol=1e-6)
    saved, dev._raw_groups = dev._raw_groups, None
    try:
        _fresh_groups(dev)
        method = dev.read(dev.mul(dev.add(a, b), b))
    finally:
        dev._raw_groups = saved
    np.testing.assert_array_equal(raw, method)


def test_raw_groups_over_many_buffers_and_sizes(dev, rng):
    # Odd lengths (size classes differ from the element counts), one group per launch.
    for n in (1, 7, 255, 1025, 4099):
        x_np = rng.standard_normal(n).astype(np.float32)
        _fresh_groups(dev)
        x = dev.upload(x_np)
        y = dev.scale(x, 1.5)
        np.testing.assert_allclose(dev.read(dev.add(x, y)), x_np + 1.5 * x_np, rtol=1e-6)


def test_a_raw_group_that_reports_an_error_is_made_again_by_wgpu_py(dev, rng):
    """A group whose entries do not fit the layout (one binding short): the C call reports
    it, create() gives None, and wgpu-py's method raises the runtime's error."""
    raw = dev._raw_groups
    x = dev.upload(rng.standard_normal(64).astype(np.float32))
    y = dev.scale(x, 2.0)
    dev.realize_lazy()
    dev.flush()
    add_layout, _ = dev._layout(2, 1)
    key = (add_layout, x._mem, y._mem)  # two bindings of the three (plus the ring) it needs
    assert raw.create(add_layout, key, (x,), (y,)) is None
    kernel = device_mod.Kernel("bad", None, add_layout, 1, 1, None)
    with pytest.raises(device_mod.wgpu.GPUError):
        dev._new_bind_group(kernel, key, (x,), (y,))
    assert key not in dev._bind_groups
    data = rng.standard_normal(99).astype(np.float32)
    np.testing.assert_allclose(dev.read(dev.scale(dev.upload(data), 2.0)), 2 * data, rtol=1e-6)
