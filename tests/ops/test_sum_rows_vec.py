"""Column sums (ops/reduce.sum_rows) four columns a thread where cols % 4 == 0: against numpy's
float64 sums over odd and chunk-edge shapes, f32 and f16, with NaN/inf columns and f16 sums
that overflow, and the launches checked so that a silent fallback to the scalar kernel (or
the vector kernel taken for cols % 4 != 0) fails."""

import numpy as np
import pytest

ROWS = [1, 2, 255, 256, 257, 1000, 16384]
COLS = [1, 3, 4, 12, 100, 384, 388, 1152]
DTYPES = [np.float32, np.float16]
F16_MAX = 65504.0


@pytest.fixture
def launches(dev, monkeypatch):
    """(kernel name, params, workgroups) of each sum_rows pass launched while the test runs."""
    seen = []
    launch = dev.launch

    def spy(kernel, inputs, outputs, params=(), grid=(1, 1, 1)):
        if kernel.name.startswith("sum_rows"):
            seen.append((kernel.name, tuple(params), grid[0] * grid[1] * grid[2]))
        return launch(kernel, inputs, outputs, params, grid)

    monkeypatch.setattr(dev, "launch", spy)
    return seen


def sums(dev, a):
    """sum_rows of the 2-D numpy array a, read back (a's dtype)."""
    out = dev.sum_rows(dev.upload(a), *a.shape)
    assert out.dtype == {np.float32: "f32", np.float16: "f16"}[a.dtype.type]
    got = dev.read(out)
    assert got.dtype == a.dtype and got.shape == (a.shape[1],)
    return got


def assert_sums(got, a):
    """got within float rounding of the float64 column sums of a: the f32 sums' error (a few
    ulps of sum |a|, whatever the order) plus, for f16 results, the final rounding to f16
    (one f16 ulp of the sum); NaN and +-inf exactly where float64 has them, as torch."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf - inf, and casts past f16's range
        exact = a.astype(np.float64).sum(axis=0)
        want = exact.astype(a.dtype)  # inf where the sum overflows a's dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(want))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(want))
    finite = np.isfinite(want)
    magnitude = np.abs(a.astype(np.float64)).sum(axis=0)[finite]
    tolerance = 1e-6 * magnitude
    if a.dtype == np.float16:
        with np.errstate(over="ignore"):  # the spacing at 65504 is inf's distance
            tolerance = tolerance + np.spacing(np.abs(want[finite])).astype(np.float64)
    error = np.abs(got[finite].astype(np.float64) - exact[finite])
    assert np.all(error <= tolerance), (error - tolerance).max()


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows", ROWS)
def test_sum_rows_matches_float64(dev, rng, launches, rows, cols, dtype):
    """Random columns (a mean per column, so that a column mixed up with another shows)
    summed over chunk edges, tails of 1-3 rows past the four-row steps, and several passes."""
    a = (rng.standard_normal((rows, cols)) + rng.uniform(-2, 2, cols)).astype(dtype)
    assert_sums(sums(dev, a), a)
    names = [name for name, _, _ in launches]
    dt = "f32" if dtype == np.float32 else "f16"
    if cols % 4 == 0:  # one pass where the rows fit one chunk, else partials in f32 and a second
        assert names == ([f"sum_rows_vec4_{dt}_{dt}"] if rows <= 256 else
                         [f"sum_rows_vec4_{dt}_f32", f"sum_rows_vec4_f32_{dt}"])
    else:
        assert names and not any(name.startswith("sum_rows_vec4") for name in names), names


def poisoned(rng, rows, cols, dtype):
    """[rows, cols] random data whose columns 4k+1 hold a NaN, 4k+2 a +inf, 4k+3 a +inf and
    a -inf (sum NaN); column 0 and 4k keep finite values; the NaN/inf at random rows, the
    last row included."""
    a = rng.standard_normal((rows, cols))
    for col in range(1, cols):
        row = rng.integers(rows) if col % 8 < 4 else rows - 1
        a[row, col] = (np.nan, np.inf, np.inf)[col % 4 - 1] if col % 4 else a[row, col]
        if col % 4 == 3 and rows > 1:
            a[(row + 1 + rng.integers(rows - 1)) % rows, col] = -np.inf
    if cols % 4 == 2 and rows > 1:  # the sign of the infinities matters: -inf alone too
        a[0, -1] = -np.inf
    return a.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f32", "f16"])
@pytest.mark.parametrize("rows, cols", [(1, 4), (2, 12), (257, 12), (1000, 388), (16384, 384), (255, 100),
                                        (1000, 3), (300, 10)])
def test_sum_rows_nan_and_inf(dev, rng, rows, cols, dtype):
    """A NaN makes its column's sum NaN, inf + -inf is NaN, one inf sign stays, as torch."""
    a = poisoned(rng, rows, cols, dtype)
    got = sums(dev, a)
    assert_sums(got, a)
    if rows > 1 and cols >= 4:
        assert np.isnan(got[1]) and np.isposinf(got[2]) and np.isnan(got[3]) and np.isfinite(got[0])


@pytest.mark.parametrize("rows, cols", [(2, 4), (3, 12), (257, 12), (1000, 388), (16384, 384), (1000, 3)])
def test_sum_rows_f16_overflow(dev, rng, rows, cols):
    """f16 sums (in f32) that leave f16's range become +-inf when stored, as torch's f16 sum
    does, and the ones just inside round to 65504: a column of large values, one that
    cancels, and sums at the rounding edge (65504 + 15 stays finite, 65504 + 16 is inf)."""
    a = np.zeros((rows, cols))
    a[:, 0::4] = 60000.0 if rows < 3 else 40000.0       # sum far beyond f16
    a[:, 1::4] = -(2.0 * F16_MAX) / rows                # -inf
    a[::2, 2::4], a[1::2, 2::4] = 30000.0, -30000.0     # cancels: small or 30000
    a[:, 3::4] = rng.standard_normal((rows, len(range(3, cols, 4))))
    if rows >= 3 and cols >= 4:
        a[:3, 3] = (32768.0, 32736.0, 15.0)               # 65519: rounds to 65504
        a[3:, 3] = 0.0
        if cols >= 8:
            a[:3, 7] = (-32768.0, -32736.0, -16.0)        # -65520: rounds to -inf
            a[3:, 7] = 0.0
    a = a.astype(np.float16)
    got = sums(dev, a)
    assert_sums(got, a)
    assert np.isposinf(got[0]) and (cols < 2 or np.isneginf(got[1]))
    if rows >= 3 and cols >= 4:
        assert got[3] == F16_MAX and (cols < 8 or np.isneginf(got[7]))


def test_sum_rows_f32_overflow(dev):
    """f32 sums past f32's range are +-inf (every order of the additions overflows)."""
    a = np.full((64, 8), 1e38, np.float32)
    a[:, 4:] = -1e38
    np.testing.assert_array_equal(sums(dev, a), [np.inf] * 4 + [-np.inf] * 4)


@pytest.mark.parametrize("rows, cols, passes", [
    (16384, 384, [(64, 256, 768), (256, 1, 3)]),       # nanoGPT's bias gradients
    (16384, 1152, [(256, 64, 576), (256, 1, 9)]),
    (16384, 1536, [(256, 64, 768), (256, 1, 12)]),
    (257, 12, [(64, 5, 5), (256, 1, 1)]),
    (256, 4, [(256, 1, 1)]),
    (1_000_000, 4, [(256, 3907, 3907), (64, 62, 62), (256, 1, 1)]),
])
def test_sum_rows_vec4_passes(dev, launches, rows, cols, passes):
    """Which chunks the passes take (rows a workgroup covers, chunks, workgroups): enough
    workgroups for an H200's first pass (>= 512 where the rows allow), one chunk for the last."""
    a = np.full((rows, cols), 1 / 64, np.float16)  # every partial sum exact, the total within f16's range
    np.testing.assert_array_equal(sums(dev, a), np.full(cols, rows / 64, np.float16))
    tiles = -(-cols // 128)
    want = []
    for i, (chunk, n_chunks, workgroups) in enumerate(passes):
        in_dtype = "f16" if i == 0 else "f32"
        out_dtype = "f16" if i == len(passes) - 1 else "f32"
        want.append((f"sum_rows_vec4_{in_dtype}_{out_dtype}", (passes[i - 1][1] if i else rows, cols, chunk,
                                                                n_chunks, tiles), workgroups))
    assert launches == want


def test_sum_rows_scalar_for_other_widths(dev, launches):
    """cols % 4 != 0 keeps one column a thread (the sum_rows kernel)."""
    a = np.ones((300, 6), np.float32)
    np.testing.assert_array_equal(sums(dev, a), np.full(6, 300, np.float32))
    assert [name for name, _, _ in launches] == ["sum_rows", "sum_rows"]
