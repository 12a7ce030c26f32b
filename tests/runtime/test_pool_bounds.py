"""The buffer pool stays bounded: freed buffers are reused without waiting for a flush,
and idle memory is given back (age and size policy of Device._release_idle)."""

import gc

import numpy as np
import pytest

import anygpu as ag
from anygpu.runtime import device as device_module


def rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


@pytest.fixture
def dev():
    return ag.gpu()


def test_create_and_drop_loop_reuses_one_buffer(dev):
    dev.flush()
    gc.collect()
    for _ in range(2000):  # warm-up: allocator arenas, caches
        ag.tensor(np.ones(7, np.float32))
    created, rss_before = dev.stats["buffers_created"], rss_bytes()
    for i in range(20_000):
        ag.tensor(np.full(7, float(i), np.float32))
    assert dev.stats["buffers_created"] - created <= 2
    assert rss_bytes() - rss_before < 16 << 20


def test_uploads_while_a_batch_is_pending_stay_bounded(dev):
    keep = dev.upload(np.ones(5, np.float32))
    dev.scale(keep, 2.0)  # one recorded command keeps the batch open
    created = dev.stats["buffers_created"]
    for _ in range(5000):
        dev.upload(np.ones(5, np.float32))
    assert dev.stats["buffers_created"] - created <= device_module.RETIRED_FLUSH_COUNT + 2


def test_uploads_are_correct_when_buffers_are_reused_at_once(dev):
    x = dev.upload(np.arange(300, dtype=np.float32))
    for i in range(50):
        y = dev.upload(np.full(300, float(i), np.float32))
        x = dev.add(x, y)
        del y
    expected = np.arange(300, dtype=np.float32) + sum(range(50))
    np.testing.assert_array_equal(dev.read(x), expected)


def test_idle_buffers_are_released_after_many_submits(dev, monkeypatch):
    monkeypatch.setattr(device_module, "POOL_IDLE_SUBMITS", 8)
    monkeypatch.setattr(device_module, "POOL_TRIM_EVERY", 2)
    big = [dev.upload(np.ones(1 << 18, np.float32)) for _ in range(8)]  # 8 MiB in distinct buffers
    del big
    gc.collect()
    assert dev.pool_bytes >= 8 << 20
    x = dev.upload(np.ones(4, np.float32))
    for _ in range(24):  # small work, one submit each
        x = dev.scale(x, 1.0)
        dev.flush()
    assert dev.pool_bytes < 1 << 20
    np.testing.assert_array_equal(dev.read(x), 1.0)


def test_idle_bytes_are_capped(dev, monkeypatch):
    monkeypatch.setattr(device_module, "POOL_TRIM_EVERY", 1)
    monkeypatch.setattr(dev, "max_idle_bytes", 2 << 20)
    big = [dev.upload(np.ones(1 << 18, np.float32)) for _ in range(8)]
    del big
    gc.collect()
    x = dev.scale(dev.upload(np.ones(4, np.float32)), 3.0)
    dev.flush()
    assert dev.pool_bytes <= 2 << 20
    np.testing.assert_array_equal(dev.read(x), 3.0)
