"""ops/nd.py's broadcasting binary ops and strided copies against numpy, over shapes whose
dims merge (contiguous runs, size-1 dims), whose broadcast is bias-like (the 2-D add
kernels) and whose layouts do neither."""

import numpy as np
import pytest

from anygpu.ops.nd import merged_dims


def test_merged_dims():
    # (4, 2, 32, 32) contiguous against (32, 32) broadcast: rows of 1024 repeated 8 times.
    shape, strides = merged_dims((4, 2, 32, 32), (2048, 1024, 32, 1), (0, 0, 32, 1))
    assert shape == (8, 1024) and strides == [(1024, 1), (0, 1)]
    # A transpose does not merge; size-1 dims go; all-ones is one dim.
    assert merged_dims((3, 1, 5), (1, 7, 3)) == ((3, 5), [(1, 3)])
    assert merged_dims((1, 1), (0, 0), (4, 1)) == ((1,), [(0,), (0,)])


SHAPES = [
    ((5, 7, 3), (7, 3)),          # per-column: add_per_col
    ((5, 7, 3), (5, 1, 1)),       # per-row: add_broadcast
    ((7, 3), (5, 7, 3)),          # the whole operand second
    ((4, 1), (1, 5)),             # both broadcast: the nd kernel
    ((2, 3, 4, 5), (3, 1, 5)),    # a gap: the nd kernel
    ((1, 3, 1, 17), (2, 3, 9, 17)),
    ((6, 1, 1), (6, 1, 1)),       # equal shapes
    ((3, 1), (3, 11)),
]


@pytest.mark.parametrize("name", ["add", "sub", "mul", "maximum"])
@pytest.mark.parametrize("a_shape, b_shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_broadcast_binary(dev, rng, name, a_shape, b_shape, dtype):
    a = rng.standard_normal(a_shape).astype(dtype)
    b = rng.standard_normal(b_shape).astype(dtype)
    buf, shape = dev.broadcast_binary(name, dev.upload(a), a_shape, dev.upload(b), b_shape)
    want = getattr(np, {"sub": "subtract", "mul": "multiply"}.get(name, name))(a.astype(np.float32),
                                                                                 b.astype(np.float32))
    assert shape == want.shape
    got = dev.read(buf).reshape(shape)
    if dtype is np.float16:
        np.testing.assert_array_equal(got, want.astype(np.float16))
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape, dims, piece", [
    ((3, 5, 2, 7), (0, 2, 1, 3), None),              # a head split's transpose
    ((4, 6, 9), (2, 0, 1), None),
    ((2, 3, 12), (0, 1, 2), (slice(None), slice(None), slice(4, 8))),   # one third of a split
    ((5, 1, 8, 1), (3, 2, 1, 0), (slice(1, 4), slice(None), slice(None, None, 3), slice(None))),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_strided_gather_and_scatter(dev, rng, shape, dims, piece, dtype):
    """Gather a sliced, permuted view of x; scatter it back into zeros at the same places."""
    x = (rng.standard_normal(shape) * 100).astype(dtype)
    index = np.arange(x.size).reshape(shape)
    if piece is not None:
        index = index[piece]
    index = index.transpose(dims)
    flat = index.ravel()
    # (strides, offset) of the view in x's elements, as the Tensor layer computes them
    strides = tuple(int(s) for s in np.array(index.strides) // index.itemsize)
    offset = int(index.ravel()[0]) if index.size else 0
    got = dev.read(dev.strided_gather(dev.upload(x), index.shape, strides, offset))
    np.testing.assert_array_equal(got, x.ravel()[flat])
    dst = dev.upload(np.zeros(x.size, dtype))
    dev.strided_scatter(dev.upload(x.ravel()[flat]), dst, index.shape, strides, offset)
    want = np.zeros(x.size, dtype)
    want[flat] = x.ravel()[flat]
    np.testing.assert_array_equal(dev.read(dst), want)


@pytest.mark.parametrize("source, target", [(np.float16, np.float32), (np.float32, np.float16)])
def test_strided_gather_converts(dev, rng, source, target):
    """A gather that converts between f16 and f32: the cast's rounding (to nearest even,
    overflow to inf, NaN kept) of the gathered elements."""
    x = (rng.standard_normal((4, 6, 10)) * 3e4).astype(source)
    x.flat[3] = np.nan
    index = np.arange(x.size).reshape(x.shape)[:, :, 2:7].transpose(2, 0, 1)
    strides = tuple(int(s) for s in np.array(index.strides) // index.itemsize)
    out = dev.strided_gather(dev.upload(x), index.shape, strides, int(index.ravel()[0]),
                             dtype="f32" if target is np.float32 else "f16")
    np.testing.assert_array_equal(dev.read(out), x.ravel()[index.ravel()].astype(target))
    with pytest.raises(ValueError, match="converts between f32 and f16 only"):
        dev.strided_gather(dev.upload(x), index.shape, strides, 0, dtype="i32")
