import numpy as np
import pytest

import anygpu as ag


def test_adapter_properties(dev):
    assert dev.adapter_name and dev.backend
    assert dev.limits["max-compute-workgroups-per-dimension"] >= 65535
    assert isinstance(dev.features, frozenset)


def test_upload_read_roundtrip(dev, rng):
    data = rng.standard_normal(1001).astype(np.float32)
    np.testing.assert_array_equal(dev.read(dev.upload(data)), data)
    ints = rng.integers(-5, 5, 37).astype(np.int32)
    buf = dev.upload(ints)
    assert buf.dtype == "i32"
    np.testing.assert_array_equal(dev.read(buf), ints)


def test_alloc_is_zero_even_from_a_reused_buffer(dev, rng):
    junk = dev.upload(rng.standard_normal(300).astype(np.float32) + 5)
    dev.synchronize()
    del junk
    dev.flush()
    np.testing.assert_array_equal(dev.read(dev.alloc(300)), np.zeros(300, np.float32))


def test_pool_reuses_memory(dev, rng):
    x = dev.upload(rng.standard_normal(5000).astype(np.float32))
    dev.read(x)
    created = dev.stats["buffers_created"]
    for _ in range(200):
        x = dev.scale(x, 1.0)
    dev.read(x)
    assert dev.stats["buffers_created"] - created < 10


def test_reused_buffer_keeps_queue_order(dev, rng):
    """A buffer freed inside a batch and re-filled by upload must not clobber the
    earlier recorded use of its old contents."""
    for _ in range(20):
        data = rng.standard_normal(257).astype(np.float32)
        a = dev.upload(data)
        b = dev.scale(a, 2.0)
        del a
        c = dev.upload(np.full(257, 7.0, np.float32))
        np.testing.assert_allclose(dev.read(b), 2 * data, rtol=1e-6)
        np.testing.assert_array_equal(dev.read(c), 7.0)


def test_batched_submits(dev, rng):
    x = dev.upload(np.ones(64, np.float32))
    submits = dev.stats["submits"]
    for _ in range(100):
        x = dev.scale(x, 1.01)
    np.testing.assert_allclose(dev.read(x), 1.01 ** 100, rtol=1e-4)
    assert dev.stats["submits"] - submits <= 2


def test_over_limit_refused_before_gpu_and_device_survives(dev):
    too_many = dev.max_buffer_bytes // 4 + 1
    with pytest.raises(ag.LimitError, match="max-"):
        dev.alloc(too_many)
    with pytest.raises(ValueError):
        dev.alloc(too_many)
    np.testing.assert_array_equal(dev.read(dev.add(dev.upload([1.0]), dev.upload([2.0]))), [3.0])


def test_grid_folds_past_65535(dev):
    assert dev.grid(70000)[0] <= 65535
    x, y, _ = dev.grid(70000)
    assert x * y >= 70000


def test_env_selection_by_name(monkeypatch):
    with pytest.raises(ag.GpuError, match="no adapter matches"):
        ag.Device(adapter="no-such-adapter-xyz")


def test_aliased_output_refused_before_gpu_work(dev):
    from anygpu.runtime import Params, load_shader
    x = dev.upload(np.ones(8, np.float32))
    params = Params("n: u32", "alpha: f32", "beta: f32")
    kernel = dev.kernel("scale", load_shader("unary.wgsl", EXPR="v * alpha", **params.subs()), 1, 1, params.format())
    with pytest.raises(ValueError, match="output buffer is also passed"):
        dev.launch(kernel, [x], [x], (8, 2.0, 0.0), (1, 1, 1))
    np.testing.assert_array_equal(dev.read(x), np.ones(8, np.float32))
    np.testing.assert_array_equal(dev.read(dev.scale(dev.upload([1.0, 2.0]), 3.0)), [3.0, 6.0])
