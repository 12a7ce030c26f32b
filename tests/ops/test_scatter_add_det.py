"""ops/index.py's scatter_add_axis is deterministic: it sums each output element's entries in
increasing j from +0.0, so it equals numpy's float32 sequential `np.add.at` into zeros bit for
bit and gives the same bits on every run; and the public ops built on it (embedding,
index_select, gather backward, scatter_add, index_add) agree with torch on the CPU."""

import numpy as np
import pytest
import torch

import anygpu as ag


def _reference(src, index, outer, dim_size, n_index, inner, per_element=False, skip=-1, dtype=np.float32):
    """out [outer, dim_size, inner] of `dtype`: np.add.at (sequential, in index order) into zeros,
    with scatter_add_axis's index rules (negatives wrap once; out of range or `skip` add nothing)."""
    src = np.asarray(src, np.float32).reshape(outer, n_index, inner).astype(dtype)
    t = np.asarray(index, np.int64)
    t = t.reshape(outer, n_index, inner) if per_element else np.broadcast_to(t.reshape(1, n_index, 1), src.shape)
    t = np.where(t < 0, t + dim_size, t)
    keep = (t >= 0) & (t < dim_size) & (t != skip)
    o, _, i = np.indices(t.shape)
    out = np.zeros((outer, dim_size, inner), dtype)
    with np.errstate(invalid="ignore"):  # inf + -inf
        np.add.at(out, (o[keep], t[keep], i[keep]), src[keep])
    return out.reshape(-1)


def _scatter(dev, src, index, outer, dim_size, n_index, inner, per_element=False, skip=-1):
    return dev.read(dev.scatter_add_axis(dev.upload(np.asarray(src, np.float32)), dev.upload(index),
                                         outer, dim_size, n_index, inner, per_element, skip))


def _same_bits(got, expected):
    """Equal bit for bit, except that any NaN matches any NaN (payloads are not specified)."""
    assert got.shape == expected.shape
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(got), nan)
    bits = got.view(np.uint32)[~nan], expected.view(np.uint32)[~nan]
    mismatch = np.flatnonzero(bits[0] != bits[1])
    assert mismatch.size == 0, (f"{mismatch.size} of {bits[0].size} differ, first at {mismatch[0]}: "
                                f"{got[~nan][mismatch[0]]!r} vs {expected[~nan][mismatch[0]]!r}")


def test_np_add_at_is_a_sequential_float32_loop():
    # The reference the tests rely on: np.add.at on float32 adds in index order, one rounding per add.
    rng = np.random.default_rng(0)
    values = (rng.standard_normal(4000) * 10.0 ** rng.integers(-3, 8, 4000)).astype(np.float32)
    rows = rng.integers(0, 3, 4000)
    out = np.zeros(3, np.float32)
    np.add.at(out, rows, values)
    loop = np.zeros(3, np.float32)
    for r, v in zip(rows, values):
        loop[r] = np.float32(loop[r] + v)
    np.testing.assert_array_equal(out.view(np.uint32), loop.view(np.uint32))
    backwards = np.zeros(3, np.float32)
    for r, v in zip(rows[::-1], values[::-1]):
        backwards[r] = np.float32(backwards[r] + v)
    assert not np.array_equal(loop, backwards)  # the data is such that the order shows in the bits


@pytest.mark.parametrize("outer, dim_size, n_index, inner", [
    (1, 65, 5000, 37),      # embedding-like: 5000 tokens into 65 rows, ~77 repeats a row
    (1, 50000, 5000, 37),   # into many rows: few repeats
    (3, 9, 400, 5),         # index_select along a middle axis
    (1, 1, 3000, 3),        # a single row takes everything
    (2, 300, 1, 260),
])
def test_rows_bitwise_as_a_sequential_loop(dev, outer, dim_size, n_index, inner):
    rng = np.random.default_rng(dim_size + n_index)
    # Magnitudes over many decades, so that the order of the adds shows in the last bits.
    src = (rng.standard_normal(outer * n_index * inner) * 10.0 ** rng.integers(-4, 5, outer * n_index * inner))
    index = rng.integers(0, dim_size, n_index).astype(np.int32)
    _same_bits(_scatter(dev, src, index, outer, dim_size, n_index, inner),
               _reference(src, index, outer, dim_size, n_index, inner))


@pytest.mark.parametrize("outer, dim_size, n_index, inner", [(4, 7, 30, 9), (1, 5, 3000, 1), (2, 1000, 50, 64)])
def test_per_element_bitwise_as_a_sequential_loop(dev, outer, dim_size, n_index, inner):
    # torch.gather's backward: one index per element of [outer, n_index, inner].
    rng = np.random.default_rng(n_index)
    n = outer * n_index * inner
    src = rng.standard_normal(n) * 10.0 ** rng.integers(-4, 5, n)
    index = rng.integers(-dim_size, dim_size, n).astype(np.int32)
    _same_bits(_scatter(dev, src, index, outer, dim_size, n_index, inner, True),
               _reference(src, index, outer, dim_size, n_index, inner, True))


# dim_size 6: one thread per output element sums its segment; 3000: more output than
# entries, so one thread per entry (the first of its segment) sums it into a zero-filled out.
@pytest.mark.parametrize("dim_size", [6, 3000])
@pytest.mark.parametrize("per_element", [False, True])
def test_skip_negative_and_out_of_range(dev, per_element, dim_size):
    rng = np.random.default_rng(7)
    outer, n_index, inner = 2, 500, 3
    count = outer * n_index * inner if per_element else n_index
    index = rng.integers(-dim_size - 3, dim_size + 4, count).astype(np.int32)  # some out of range
    index[:4] = [-1, -dim_size, dim_size, -dim_size - 1]
    index[4:40] = 4  # a long segment
    src = rng.standard_normal(outer * n_index * inner)
    for skip in (-1, 0, 4, 5):
        expected = _reference(src, index, outer, dim_size, n_index, inner, per_element, skip)
        _same_bits(_scatter(dev, src, index, outer, dim_size, n_index, inner, per_element, skip), expected)
        if skip >= 0:
            assert not expected.reshape(outer, dim_size, inner)[:, skip].any()


@pytest.mark.parametrize("dim_size", [8, 40])
def test_nan_inf_and_signed_zeros(dev, dim_size):
    # Row 0: a NaN among numbers; 1: inf + -inf; 2: inf; 3: only -0.0 (torch and numpy: 0 + -0 = +0);
    # 4: -0.0 and +0.0; 5: -inf; 6: nothing; 7: 1e30 - 1e30 + tiny (order decides the bits).
    rows = [0, 1, 0, 2, 3, 1, 4, 3, 5, 0, 7, 7, 7, 4, 2]
    src = [1.0, np.inf, np.nan, np.inf, -0.0, -np.inf, -0.0, -0.0, -np.inf, 2.0, 1e30, -1e30, 1e-3, 0.0, 3.0]
    index = np.array(rows, np.int32)
    got = _scatter(dev, src, index, 1, dim_size, len(rows), 1)
    expected = _reference(src, index, 1, dim_size, len(rows), 1)
    _same_bits(got, expected)
    assert np.isnan(got[[0, 1]]).all() and got[2] == np.inf and got[5] == -np.inf and got[7] == np.float32(1e-3)
    assert got[3] == 0 and not np.signbit(got[3]) and not np.signbit(got[4]) and not np.signbit(got[6])
    # Per element the same.
    _same_bits(_scatter(dev, src, index, 1, dim_size, len(rows), 1, True), expected)


def test_same_bits_on_every_run(dev):
    # The old compare-and-swap kernel's sums varied in the last bit from run to run here.
    rng = np.random.default_rng(3)
    outer, dim_size, n_index, inner = 1, 17, 20000, 24
    src = dev.upload(rng.standard_normal(n_index * inner).astype(np.float32))
    index = dev.upload(rng.integers(0, dim_size, n_index).astype(np.int32))
    runs = [dev.read(dev.scatter_add_axis(src, index, outer, dim_size, n_index, inner)).view(np.uint32)
            for _ in range(5)]
    for run in runs[1:]:
        np.testing.assert_array_equal(run, runs[0])


def test_f16_sums_in_f32_and_rounds_once(dev):
    if not dev.supports("f16"):
        pytest.skip("no shader-f16")
    rng = np.random.default_rng(5)
    outer, dim_size, n_index, inner = 2, 11, 300, 7
    src = rng.standard_normal(outer * n_index * inner).astype(np.float16)
    index = rng.integers(-dim_size, dim_size, n_index).astype(np.int32)
    out = dev.scatter_add_axis(dev.upload(src, "f16"), dev.upload(index), outer, dim_size, n_index, inner)
    assert out.dtype == "f16"
    expected = _reference(src, index, outer, dim_size, n_index, inner).astype(np.float16)
    np.testing.assert_array_equal(dev.read(out).view(np.uint16), expected.view(np.uint16))


def test_empty_and_errors(dev):
    empty_index = dev.upload(np.zeros(0, np.int32))
    out = dev.scatter_add_axis(dev.upload(np.zeros(0, np.float32)), empty_index, 2, 3, 0, 4)
    assert dev.read(out).tolist() == [0.0] * 24
    assert dev.scatter_add_axis(dev.upload(np.ones(6, np.float32)), dev.upload(np.zeros(3, np.int32)),
                                1, 0, 3, 2).len == 0
    with pytest.raises(ValueError, match="scatter_add: src must be an f32 or f16 buffer, got i32"):
        dev.scatter_add_axis(dev.upload(np.ones(3, np.int32)), dev.upload(np.zeros(3, np.int32)), 1, 2, 3, 1)
    with pytest.raises(ValueError, match="scatter_add: index must be an int32 buffer"):
        dev.scatter_add_axis(dev.upload(np.ones(3, np.float32)), dev.upload(np.zeros(3, np.float32)), 1, 2, 3, 1)


# --- the public ops, against torch on the CPU --------------------------------------------------

def _grad(t):
    return t.grad.numpy() if hasattr(t.grad, "numpy") else np.asarray(t.grad)


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward_as_torch(padding_idx):
    rng = np.random.default_rng(11)
    rows, dim = 40, 33
    ids = rng.integers(0, rows, (6, 97))
    ids[0, :5] = 3
    grad_out = rng.standard_normal((6, 97, dim)).astype(np.float32)
    weight = rng.standard_normal((rows, dim)).astype(np.float32)

    emb = ag.nn.Embedding(rows, dim, padding_idx=padding_idx)
    with ag.no_grad():
        emb.weight.copy_(ag.tensor(weight))
    (emb(ag.tensor(ids.astype(np.int32))) * ag.tensor(grad_out)).sum().backward()
    ref = torch.nn.Embedding(rows, dim, padding_idx=padding_idx)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(weight))
    (ref(torch.tensor(ids)) * torch.tensor(grad_out)).sum().backward()

    got = _grad(emb.weight)
    np.testing.assert_allclose(got, ref.weight.grad.numpy(), rtol=1e-5, atol=1e-5)
    # Bit for bit: the sum over tokens in token order, as a float32 loop.
    expected = _reference(grad_out.reshape(-1), ids.reshape(-1), 1, rows, ids.size, dim,
                          skip=-1 if padding_idx is None else padding_idx)
    _same_bits(got.reshape(-1), expected)
    if padding_idx is not None:
        assert not got[padding_idx].any()


def test_index_select_backward_as_torch():
    rng = np.random.default_rng(12)
    x = rng.standard_normal((5, 8, 6)).astype(np.float32)
    idx = rng.integers(0, 8, 300)
    g = rng.standard_normal((5, 300, 6)).astype(np.float32)
    a = ag.tensor(x, requires_grad=True)
    (a.index_select(1, ag.tensor(idx.astype(np.int32))) * ag.tensor(g)).sum().backward()
    t = torch.tensor(x, requires_grad=True)
    (t.index_select(1, torch.tensor(idx)) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(_grad(a), t.grad.numpy(), rtol=1e-5, atol=1e-5)
    _same_bits(_grad(a).reshape(-1), _reference(g.reshape(-1), idx, 5, 8, 300, 6))


def test_gather_backward_as_torch():
    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 9, 5)).astype(np.float32)
    idx = rng.integers(0, 9, (4, 200, 5))
    g = rng.standard_normal((4, 200, 5)).astype(np.float32)
    a = ag.tensor(x, requires_grad=True)
    (a.gather(1, ag.tensor(idx.astype(np.int32))) * ag.tensor(g)).sum().backward()
    t = torch.tensor(x, requires_grad=True)
    (t.gather(1, torch.tensor(idx)) * torch.tensor(g)).sum().backward()
    np.testing.assert_allclose(_grad(a), t.grad.numpy(), rtol=1e-5, atol=1e-5)
    _same_bits(_grad(a).reshape(-1), _reference(g.reshape(-1), idx.reshape(-1), 4, 9, 200, 5, True))


def test_scatter_add_and_index_add_as_torch():
    rng = np.random.default_rng(14)
    x = rng.standard_normal((6, 7)).astype(np.float32)
    src = rng.standard_normal((500, 7)).astype(np.float32)
    idx = rng.integers(0, 6, (500, 7))
    got = ag.tensor(x).scatter_add_(0, ag.tensor(idx.astype(np.int32)), ag.tensor(src)).numpy()
    expected = torch.tensor(x).scatter_add_(0, torch.tensor(idx), torch.tensor(src)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    # anygpu adds the scattered sum to x (x + sum), the sum itself summed as a float32 loop.
    summed = _reference(src.reshape(-1), idx.reshape(-1), 1, 6, 500, 7, True).reshape(6, 7)
    _same_bits(got.reshape(-1), (x + summed).reshape(-1))

    rows = rng.integers(0, 6, 500)
    got = ag.tensor(x).index_add_(0, ag.tensor(rows.astype(np.int32)), ag.tensor(src)).numpy()
    expected = torch.tensor(x).index_add_(0, torch.tensor(rows), torch.tensor(src)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    summed = _reference(src.reshape(-1), rows, 1, 6, 500, 7).reshape(6, 7)
    _same_bits(got.reshape(-1), (x + summed).reshape(-1))
