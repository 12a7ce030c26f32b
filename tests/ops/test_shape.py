"""transpose, concat, the broadcast adds and their adjoint sums against numpy."""

import numpy as np
import pytest


@pytest.mark.parametrize("outer, d0, d1, inner", [(1, 33, 17, 1), (3, 5, 7, 4), (2, 1, 9, 3)])
def test_transpose(dev, rng, upload, read, outer, d0, d1, inner):
    a = rng.standard_normal((outer, d0, d1, inner)).astype(np.float32)
    out = read(dev.transpose(upload(a), outer, d0, d1, inner), (outer, d1, d0, inner))
    np.testing.assert_array_equal(out, a.transpose(0, 2, 1, 3))


@pytest.mark.parametrize("outer, a_inner, b_inner", [(5, 3, 4), (1, 100, 1), (7, 0, 2), (4, 6, 0)])
def test_concat(dev, rng, upload, read, outer, a_inner, b_inner):
    a = rng.standard_normal((outer, a_inner)).astype(np.float32)
    b = rng.standard_normal((outer, b_inner)).astype(np.float32)
    out = read(dev.concat(upload(a), upload(b), outer, a_inner, b_inner), (outer, a_inner + b_inner))
    np.testing.assert_array_equal(out, np.concatenate([a, b], axis=1))


def test_add_broadcast(dev, rng, upload, read):
    a = rng.standard_normal((6, 11)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    np.testing.assert_array_equal(read(dev.add_broadcast(upload(a), upload(b), 6, 11), (6, 11)), a + b[:, None])


def test_add_per_col(dev, rng, upload, read):
    a = rng.standard_normal((6, 11)).astype(np.float32)
    b = rng.standard_normal(11).astype(np.float32)
    np.testing.assert_array_equal(read(dev.add_per_col(upload(a), upload(b), 6, 11), (6, 11)), a + b)


# Short rows (one thread each), long rows (workgroup trees), and rows long enough to need
# a second pass over the chunk partials.
@pytest.mark.parametrize("outer, inner", [(50, 7), (3, 1000), (2, 70_000), (70_000, 3)])
def test_sum_inner(dev, rng, upload, read, close, outer, inner):
    a = rng.standard_normal((outer, inner)).astype(np.float32)
    close(read(dev.sum_inner(upload(a), outer, inner)), a.astype(np.float64).sum(axis=1), atol=1e-3)


@pytest.mark.parametrize("rows, cols", [(7, 50), (1000, 3), (70_000, 2), (3, 130), (1, 5)])
def test_sum_rows(dev, rng, upload, read, close, rows, cols):
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    close(read(dev.sum_rows(upload(a), rows, cols)), a.astype(np.float64).sum(axis=0), atol=1e-3)


@pytest.mark.parametrize("rows, cols", [(7, 50), (1000, 3), (70_000, 2), (257, 131), (1, 5)])
def test_sum_rows_f16(dev, rng, rows, cols):
    """f16 columns summed in f32 (a tree of f32 partials), the result rounded to f16 once,
    as the f16 bias gradient of an autocast linear."""
    a = rng.standard_normal((rows, cols)).astype(np.float16)
    out = dev.sum_rows(dev.upload(a), rows, cols)
    assert out.dtype == "f16"
    want = a.astype(np.float64).sum(axis=0)
    got = dev.read(out).astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=1e-3 * np.sqrt(rows))
    reduced = dev.reduce_axis(dev.upload(a), 1, rows, cols, "sum")   # the nd route for f16 lands here too
    np.testing.assert_array_equal(dev.read(reduced), dev.read(out))


def test_sums_are_the_adjoints_of_the_broadcast_adds(dev, rng, upload, read, close, vjp):
    rows, cols = 9, 13
    a = rng.standard_normal((rows, cols)).astype(np.float32)
    grad = rng.standard_normal((rows, cols)).astype(np.float32)
    _, (_, per_col_grad) = vjp(lambda a_, b_: a_ + b_, [a, np.ones(cols, np.float32)], grad)
    close(read(dev.sum_rows(upload(grad), rows, cols)), per_col_grad)
    _, (_, per_row_grad) = vjp(lambda a_, b_: a_ + b_[:, None], [a, np.ones(rows, np.float32)], grad)
    close(read(dev.sum_inner(upload(grad), rows, cols)), per_row_grad)


def test_sum_all(dev, rng, upload, read, close):
    x = rng.standard_normal(123_457).astype(np.float32)
    close(read(dev.sum_all(upload(x))), [x.astype(np.float64).sum()], atol=1e-2)
    np.testing.assert_array_equal(read(dev.sum_all(upload([]))), [0.0])
