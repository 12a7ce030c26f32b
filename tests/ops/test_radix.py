"""ops/radix.py: the stable LSD radix sort of u32 keys with an i32 payload and the exclusive
u32 scan under it, against numpy (argsort(kind='stable'), cumsum)."""

import numpy as np
import pytest

# Sizes around the sort's 256-key block.
SIZES = [0, 1, 255, 256, 257, 1000, 70000, 300000]


def _scan(dev, x):
    return dev.read(dev.exclusive_scan_u32(dev.upload(x, "u32"), x.size))


def _expected_scan(x):
    return (np.cumsum(x, dtype=np.uint64) - x).astype(np.uint32)  # mod 2**32, as the GPU's words


# Around the scan's 1024-element block, 4-element thread and levels (one per factor of 1024).
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 255, 1023, 1024, 1025, 4099, 70000, 300000, 1024**2, 1024**2 + 1])
def test_exclusive_scan_matches_cumsum(dev, rng, n):
    x = rng.integers(0, 1000, n).astype(np.uint32)
    np.testing.assert_array_equal(_scan(dev, x), _expected_scan(x))


def test_exclusive_scan_three_levels_and_wraps(dev, rng):
    # 1024**2 + 5 elements need a third level; large words wrap mod 2**32 like numpy's uint32.
    n = 1024**2 + 5
    x = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
    np.testing.assert_array_equal(_scan(dev, x), _expected_scan(x))


def test_exclusive_scan_refuses_wrong_buffers(dev):
    with pytest.raises(ValueError, match="exclusive_scan_u32: x must hold u32 elements, got i32"):
        dev.exclusive_scan_u32(dev.upload(np.zeros(4, np.int32)), 4)
    with pytest.raises(ValueError, match="exclusive_scan_u32: x has 4 elements, expected n = 5"):
        dev.exclusive_scan_u32(dev.upload(np.zeros(4, np.uint32)), 5)


def _sorted(dev, keys, key_bits, values=None):
    n = keys.size
    values = np.arange(n, dtype=np.int32) if values is None else values
    out_keys, out_values = dev.sort_pairs(dev.upload(keys, "u32"), dev.upload(values, "i32"), n, key_bits)
    return dev.read(out_keys), dev.read(out_values)


def _check_sort(dev, keys, key_bits):
    got_keys, got_order = _sorted(dev, keys, key_bits)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(got_order, order)
    np.testing.assert_array_equal(got_keys, keys[order])


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("key_bits", [1, 5, 8, 9, 16, 23, 32])
def test_sort_pairs_is_numpy_stable_argsort(dev, rng, n, key_bits):
    # Few distinct keys (many duplicates: stability shows) spread over the whole key range.
    distinct = rng.integers(0, 2**key_bits, 40, dtype=np.uint64).astype(np.uint32)
    distinct[:2] = [0, 2**key_bits - 1]
    _check_sort(dev, rng.choice(distinct, n), key_bits)


@pytest.mark.parametrize("key_bits", range(1, 33))
def test_sort_pairs_every_key_width(dev, rng, key_bits):
    keys = rng.integers(0, 2**key_bits, 3000, dtype=np.uint64).astype(np.uint32)
    keys[::7] = keys[0]  # duplicates besides the random ones
    _check_sort(dev, keys, key_bits)


def test_sort_pairs_carries_any_payload_and_ignores_bits_above_key_bits(dev, rng):
    keys = rng.integers(0, 16, 1000).astype(np.uint32)
    values = rng.integers(-2**31, 2**31, 1000, dtype=np.int64).astype(np.int32)
    got_keys, got_values = _sorted(dev, keys, 4, values)
    order = np.argsort(keys, kind="stable")
    np.testing.assert_array_equal(got_values, values[order])
    # Bits above key_bits ride along but are not compared: only the low 4 bits order the keys.
    high = keys | (rng.integers(0, 2**28, 1000).astype(np.uint32) << 4)
    got_keys, got_order = _sorted(dev, high, 4)
    np.testing.assert_array_equal(got_order, order)
    np.testing.assert_array_equal(got_keys, high[order])


def test_sort_pairs_sorted_and_reversed_input(dev):
    n = 5000
    _check_sort(dev, np.arange(n, dtype=np.uint32), 13)
    _check_sort(dev, np.arange(n, dtype=np.uint32)[::-1].copy(), 13)
    _check_sort(dev, np.full(n, 7, np.uint32), 3)


def test_sort_pairs_no_bits_and_errors(dev):
    keys, values = _sorted(dev, np.zeros(300, np.uint32), 0)
    np.testing.assert_array_equal(values, np.arange(300))
    empty = dev.sort_pairs(dev.upload(np.zeros(0, np.uint32)), dev.upload(np.zeros(0, np.int32)), 0, 8)
    assert [b.len for b in empty] == [0, 0]
    k, v = dev.upload(np.zeros(4, np.uint32)), dev.upload(np.zeros(4, np.int32))
    with pytest.raises(ValueError, match=r"sort_pairs: key_bits must be an integer in \[0, 32\], got 33"):
        dev.sort_pairs(k, v, 4, 33)
    with pytest.raises(ValueError, match="sort_pairs: values must hold i32 elements, got u32"):
        dev.sort_pairs(k, k, 4, 8)
    with pytest.raises(ValueError, match="sort_pairs: keys has 4 elements, expected n = 3"):
        dev.sort_pairs(k, v, 3, 8)
