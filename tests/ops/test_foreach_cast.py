"""The multi-tensor f32 <-> f16 conversion (ops/foreach.py cast): several Buffers of any
lengths per dispatch, each with the bits of the one-Buffer cast kernel and numpy's
conversion (round to nearest even, overflow to inf past 65519, subnormals), NaN kept a NaN
(its sign and payload are the GPU's: NVIDIA returns a positive NaN, as CUDA does)."""

from __future__ import annotations

import numpy as np
import pytest

from f16_bits import needs_f16, same  # (tests/ops/f16_bits.py)

from anygpu.ops import foreach, gpu

# Lengths: empty, odd, not multiples of 4, one and several workgroups; more Buffers than one
# dispatch binds (MAX_TENSORS = 12), so the list is cut in two.
SIZES = [144, 16, 4608, 0, 32, 1, 3, 257, 640, 10, 70001, 5, 64, 7]
# f32 bits at the edges of f16: 65504, the halfway points 65519 (down) and 65520 (up to inf),
# ties to even in the normal and subnormal range, the smallest subnormal and half of it,
# an f32 subnormal, -0, inf, NaN.
EDGES = np.array([0x477FE000, 0x477FEFFF, 0x477FF000, 0xC77FF000, 0x3F801000, 0x3F803000, 0x33800000,
                  0x33000000, 0x33000001, 0x00000001, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000],
                 np.uint32).view(np.float32)


def _arrays(rng) -> list[np.ndarray]:
    arrays = [(rng.standard_normal(n) * 10.0 ** rng.integers(-9, 6, n)).astype(np.float32) for n in SIZES]
    arrays[2][:len(EDGES)] = EDGES
    arrays[-1][:] = EDGES[:7]
    return arrays


def test_f32_to_f16_and_back_match_numpy_and_the_cast_kernel():
    dev = gpu()
    needs_f16(dev)
    arrays = _arrays(np.random.default_rng(0))
    bufs = [dev.upload(a) for a in arrays]
    before = dev.stats["dispatches"]
    halves = foreach.cast_many(dev, bufs, "f16")
    live = sum(1 for n in SIZES if n)
    assert dev.stats["dispatches"] - before == -(-live // foreach.per_dispatch(dev, 2))
    with np.errstate(over="ignore"):
        for a, b, h in zip(arrays, bufs, halves):
            assert h.dtype == "f16" and h.len == len(a)
            same(dev.read(h), a.astype(np.float16), f"{len(a)} elements")
            if len(a):
                same(dev.read(h), dev.read(dev.cast(b, "f16")), f"{len(a)} elements, against the cast kernel")
    singles = foreach.cast_many(dev, halves, "f32")
    for h, s in zip(halves, singles):
        same(dev.read(s), dev.read(h).astype(np.float32), f"{h.len} halves")


def test_into_given_buffers_and_errors():
    dev = gpu()
    needs_f16(dev)
    a = dev.upload(np.array([1.5, -2.0, 65520.0], np.float32))
    out = dev.empty(3, "f16")
    assert foreach.cast_many(dev, [a], "f16", outs=[out])[0] is out
    np.testing.assert_array_equal(dev.read(out), np.array([1.5, -2.0, np.inf], np.float16))
    assert foreach.cast_many(dev, [], "f16") == []
    with pytest.raises(ValueError, match="converts f32 Buffers to f16 or f16 to f32"):
        foreach.cast_many(dev, [a], "f32")
    with pytest.raises(ValueError, match="converts f32 Buffers to f16 or f16 to f32"):
        foreach.cast_many(dev, [a, dev.empty(2, "f16")], "f16")
    with pytest.raises(ValueError, match="converts f32 Buffers"):
        foreach.cast_many(dev, [dev.upload(np.ones(2, np.int32))], "f16")
    with pytest.raises(ValueError, match=r"outs\[0\] has 2 elements, expected len\(bufs\[0\]\) = 3"):
        foreach.cast_many(dev, [a], "f16", outs=[dev.empty(2, "f16")])
    with pytest.raises(ValueError, match=r"outs\[0\] must be f16"):
        foreach.cast_many(dev, [a], "f16", outs=[dev.empty(3, "f32")])
