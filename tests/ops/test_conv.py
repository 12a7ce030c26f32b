"""conv2d, conv_transpose2d and conv2d's gradients against torch on the CPU."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from anygpu.ops.conv import conv_output_size, conv_transpose_output_size
from anygpu.ops import conv as conv_module
from anygpu.ops.conv_gen import ConvTiles, choose_tiles

# (batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups, bias)
CONV_CASES = {
    "stride2_pad1_even": (2, 3, 8, 8, 5, 3, 3, 2, 1, 1, 1, True),
    "dilation2": (1, 4, 9, 7, 6, 3, 3, 1, 2, 2, 1, False),
    "groups2_rect_kernel": (2, 4, 7, 9, 6, 3, 2, 1, 1, 1, 2, True),
    "depthwise": (3, 6, 10, 10, 6, 3, 3, 1, 1, 1, 6, True),
    "odd_many_out_channels": (1, 3, 11, 13, 70, 5, 5, (2, 3), (2, 1), 1, 1, True),
    "pointwise_long_k": (2, 40, 6, 6, 33, 1, 1, 1, 0, 1, 1, False),
    "kernel_covers_input": (2, 1, 5, 5, 1, 5, 5, 1, 0, 1, 1, True),
    "stride3_remainder_groups": (1, 4, 8, 7, 4, 3, 3, 3, 0, 1, 2, False),
    "dilated_strided": (2, 2, 12, 11, 3, 3, 3, 2, 2, (2, 3), 1, True),
}


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _conv_data(rng, case):
    batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups, with_bias = case
    x = rng.standard_normal((batch, in_c, in_h, in_w)).astype(np.float32)
    w = rng.standard_normal((out_c, in_c // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(out_c).astype(np.float32) if with_bias else None
    return x, w, b


@pytest.mark.parametrize("name", CONV_CASES)
def test_conv2d_matches_torch(dev, rng, upload, read, close, name):
    case = CONV_CASES[name]
    batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups, _ = case
    x, w, b = _conv_data(rng, case)
    out = dev.conv2d(upload(x), upload(w), None if b is None else upload(b), batch, in_c, in_h, in_w,
                     out_c, kh, kw, stride, padding, dilation, groups)
    expected = F.conv2d(torch.tensor(x), torch.tensor(w), None if b is None else torch.tensor(b),
                        _pair(stride), _pair(padding), _pair(dilation), groups).numpy()
    close(read(out, expected.shape), expected)


@pytest.mark.parametrize("name", CONV_CASES)
def test_conv2d_gradients_match_torch_autograd(dev, rng, upload, read, close, vjp, name):
    case = CONV_CASES[name]
    batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups, _ = case
    stride, padding, dilation = _pair(stride), _pair(padding), _pair(dilation)
    x, w, b = _conv_data(rng, case)
    out_h = conv_output_size(in_h, kh, stride[0], padding[0], dilation[0])
    out_w = conv_output_size(in_w, kw, stride[1], padding[1], dilation[1])
    grad_out = rng.standard_normal((batch, out_c, out_h, out_w)).astype(np.float32)
    _, (gx, gw, gb) = vjp(lambda x_, w_, b_: F.conv2d(x_, w_, b_, stride, padding, dilation, groups),
                          [x, w, b], grad_out)

    g = upload(grad_out)
    grad_input = dev.conv2d_grad_input(g, upload(w), batch, in_c, in_h, in_w, out_c, out_h, out_w,
                                       kh, kw, stride, padding, dilation, groups)
    close(read(grad_input, x.shape), gx)
    grad_weight = dev.conv2d_grad_weight(upload(x), g, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw,
                                         stride, padding, dilation, groups)
    close(read(grad_weight, w.shape), gw)
    if gb is not None:
        close(read(dev.conv2d_grad_bias(g, batch, out_c, out_h, out_w)), gb)


def test_grad_input_when_the_window_misses_the_last_rows(dev, rng, upload, read, close, vjp):
    """(in + 2p - d(k-1) - 1) mod stride != 0: the last input rows/columns get no gradient
    from the sliding window, and the result must still be in_h x in_w."""
    batch, in_c, in_h, in_w, out_c, k, stride = 2, 3, 10, 12, 4, 3, (3, 2)
    assert (in_h - k) % stride[0] and (in_w - k) % stride[1]
    x = rng.standard_normal((batch, in_c, in_h, in_w)).astype(np.float32)
    w = rng.standard_normal((out_c, in_c, k, k)).astype(np.float32)
    out_h, out_w = (in_h - k) // stride[0] + 1, (in_w - k) // stride[1] + 1
    grad_out = rng.standard_normal((batch, out_c, out_h, out_w)).astype(np.float32)
    _, (gx, _) = vjp(lambda x_, w_: F.conv2d(x_, w_, stride=stride), [x, w], grad_out)
    grad_input = read(dev.conv2d_grad_input(upload(grad_out), upload(w), batch, in_c, in_h, in_w, out_c,
                                            out_h, out_w, k, k, stride, 0, 1, 1), x.shape)
    close(grad_input, gx)
    assert np.all(grad_input[:, :, -1, :] == 0) and np.any(grad_input[:, :, 0, :] != 0)


def test_grad_weight_long_reduction_is_split_and_summed(dev, rng, upload, read, close, vjp):
    """batch*out_h*out_w far above one workgroup's share: the split-K partials must add up."""
    batch, in_c, size, out_c, k = 8, 4, 24, 8, 3
    x = rng.standard_normal((batch, in_c, size, size)).astype(np.float32)
    w = rng.standard_normal((out_c, in_c, k, k)).astype(np.float32)
    grad_out = rng.standard_normal((batch, out_c, size, size)).astype(np.float32)
    _, (_, gw) = vjp(lambda x_, w_: F.conv2d(x_, w_, padding=1), [x, w], grad_out)
    grad_weight = dev.conv2d_grad_weight(upload(x), upload(grad_out), batch, in_c, size, size, out_c, size, size,
                                         k, k, 1, 1, 1, 1)
    close(read(grad_weight, w.shape), gw, rtol=1e-4, atol=1e-3)


# (batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, output_padding, dilation, groups, bias)
TRANSPOSE_CASES = {
    "stride2_output_padding": (2, 4, 5, 5, 3, 3, 3, 2, 1, 1, 1, 1, True),
    "groups_rect": (1, 4, 4, 6, 6, 3, 2, (2, 3), (0, 1), (1, 2), 1, 2, False),
    "dilation2": (2, 3, 5, 4, 2, 3, 3, 1, 1, 0, 2, 1, True),
    "stride3_dilation2": (1, 2, 3, 3, 4, 4, 4, 3, 1, 2, 2, 2, True),
    "stride2_dilation2_empty_phases": (1, 2, 4, 4, 2, 3, 3, 2, 0, 1, 2, 1, False),
    "depthwise": (2, 6, 5, 5, 6, 3, 3, 2, 1, 1, 1, 6, True),
    "many_channels": (1, 20, 3, 4, 70, 2, 2, 2, 0, 0, 1, 1, True),
}


@pytest.mark.parametrize("name", TRANSPOSE_CASES)
def test_conv_transpose2d_matches_torch(dev, rng, upload, read, close, name):
    (batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, output_padding, dilation, groups,
     with_bias) = TRANSPOSE_CASES[name]
    x = rng.standard_normal((batch, in_c, in_h, in_w)).astype(np.float32)
    w = rng.standard_normal((in_c, out_c // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(out_c).astype(np.float32) if with_bias else None
    out = dev.conv_transpose2d(upload(x), upload(w), None if b is None else upload(b), batch, in_c, in_h, in_w,
                               out_c, kh, kw, stride, padding, output_padding, dilation, groups)
    expected = F.conv_transpose2d(torch.tensor(x), torch.tensor(w), None if b is None else torch.tensor(b),
                                  _pair(stride), _pair(padding), _pair(output_padding), groups,
                                  _pair(dilation)).numpy()
    close(read(out, expected.shape), expected)


def test_conv2d_seed_identity(dev, upload, read):
    """The seed's tape test: a 1x1 kernel of 1 and bias 0 returns the input."""
    data = np.arange(1, 10, dtype=np.float32)
    out = dev.conv2d(upload(data), upload([1.0]), upload([0.0]), 1, 1, 3, 3, 1, 1, 1, (1, 1), (0, 0), (1, 1), 1)
    np.testing.assert_allclose(read(out), data, rtol=1e-6)


def test_conv2d_past_65535_workgroups_folds_the_grid(dev, rng, upload, read, close):
    """More workgroups than one grid dimension holds (here one per depthwise group): the
    linear tile index must come back right across the fold, up to the last group."""
    groups, batch, in_h, in_w = 66_000, 1, 4, 8
    tiles = choose_tiles(1, batch * in_h * in_w)
    assert -(-batch * in_h * in_w // tiles.tile_n) * groups > 65535
    x = rng.standard_normal((batch, groups, in_h, in_w)).astype(np.float32)
    w = rng.standard_normal((groups, 1, 1, 1)).astype(np.float32)
    b = rng.standard_normal(groups).astype(np.float32)
    out = read(dev.conv2d(upload(x), upload(w), upload(b), batch, groups, in_h, in_w, groups, 1, 1,
                          groups=groups), x.shape)
    close(out, x * w.reshape(1, groups, 1, 1) + b.reshape(1, groups, 1, 1))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(batch=st.integers(1, 3), group_in_c=st.integers(1, 5), group_out_c=st.integers(1, 9), groups=st.integers(1, 3),
       in_h=st.integers(1, 12), in_w=st.integers(1, 12), kh=st.integers(1, 4), kw=st.integers(1, 4),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)), padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), with_bias=st.booleans(),
       output_padding=st.tuples(st.integers(0, 2), st.integers(0, 2)))
def test_conv_ops_on_random_shapes(dev, upload, read, vjp, batch, group_in_c, group_out_c, groups, in_h, in_w,
                                   kh, kw, stride, padding, dilation, with_bias, output_padding):
    """conv2d, its input and weight gradients, and conv_transpose2d (fed the gradient as
    its input, so the same weight serves) against torch on random shapes."""
    out_h = conv_output_size(in_h, kh, stride[0], padding[0], dilation[0])
    out_w = conv_output_size(in_w, kw, stride[1], padding[1], dilation[1])
    assume(out_h >= 1 and out_w >= 1)
    in_c, out_c = group_in_c * groups, group_out_c * groups
    rng = np.random.default_rng(in_h * 1000 + in_w)
    x = rng.standard_normal((batch, in_c, in_h, in_w)).astype(np.float32)
    w = rng.standard_normal((out_c, group_in_c, kh, kw)).astype(np.float32)
    b = rng.standard_normal(out_c).astype(np.float32) if with_bias else None
    grad_out = rng.standard_normal((batch, out_c, out_h, out_w)).astype(np.float32)
    expected, (gx, gw, gb) = vjp(lambda x_, w_, b_: F.conv2d(x_, w_, b_, stride, padding, dilation, groups),
                                       [x, w, b], grad_out)

    def check(buf, reference):
        np.testing.assert_allclose(read(buf, reference.shape), reference, rtol=1e-4, atol=1e-4)

    check(dev.conv2d(upload(x), upload(w), None if b is None else upload(b), batch, in_c, in_h, in_w, out_c,
                     kh, kw, stride, padding, dilation, groups), expected)
    g = upload(grad_out)
    check(dev.conv2d_grad_input(g, upload(w), batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw,
                                stride, padding, dilation, groups), gx)
    check(dev.conv2d_grad_weight(upload(x), g, batch, in_c, in_h, in_w, out_c, out_h, out_w, kh, kw,
                                 stride, padding, dilation, groups), gw)

    # torch requires output_padding < max(stride, dilation) in each axis.
    output_padding = tuple(p % max(s, d) for p, s, d in zip(output_padding, stride, dilation))
    assume(conv_transpose_output_size(out_h, kh, stride[0], padding[0], output_padding[0], dilation[0]) >= 1)
    assume(conv_transpose_output_size(out_w, kw, stride[1], padding[1], output_padding[1], dilation[1]) >= 1)
    t_bias = rng.standard_normal(in_c).astype(np.float32) if with_bias else None
    expected_t = F.conv_transpose2d(torch.tensor(grad_out), torch.tensor(w),
                                    None if t_bias is None else torch.tensor(t_bias),
                                    stride, padding, output_padding, groups, dilation).numpy()
    check(dev.conv_transpose2d(g, upload(w), None if t_bias is None else upload(t_bias), batch, out_c, out_h,
                               out_w, in_c, kh, kw, stride, padding, output_padding, dilation, groups), expected_t)


# The generated code differs by tile only in counts, so a few variants cover the edges:
# fewer threads than TILE_K (4x32), 4-row threads (4x*), the smallest and largest tiles.
# (Each variant costs a compile of about a second on lavapipe with a cold shader cache.)
@pytest.mark.parametrize("tile_m, tile_n", [(4, 32), (4, 128), (8, 64), (16, 32), (32, 128), (64, 64)])
def test_tile_variants_compute_the_same(dev, rng, upload, read, close, vjp, monkeypatch, tile_m, tile_n):
    """Whatever tiles choose_tiles picks for a shape, the result is the same: variants of
    each kernel on a problem with partial edge tiles in rows, columns and k."""
    tiles = ConvTiles(tile_m, tile_n, rows=4 if tile_m == 4 else 8)
    monkeypatch.setattr(conv_module, "_pick_tiles", lambda dev, kind, problem, rows, cols, given: tiles)
    batch, in_c, in_h, in_w, out_c, k, stride, padding = 2, 3, 9, 7, 5, 3, 2, 1
    out_h, out_w = conv_output_size(in_h, k, stride, padding, 1), conv_output_size(in_w, k, stride, padding, 1)
    x = rng.standard_normal((batch, in_c, in_h, in_w)).astype(np.float32)
    w = rng.standard_normal((out_c, in_c, k, k)).astype(np.float32)
    b = rng.standard_normal(out_c).astype(np.float32)
    grad_out = rng.standard_normal((batch, out_c, out_h, out_w)).astype(np.float32)
    expected, (gx, gw, _) = vjp(lambda x_, w_, b_: F.conv2d(x_, w_, b_, stride, padding), [x, w, b], grad_out)
    g = upload(grad_out)
    close(read(dev.conv2d(upload(x), upload(w), upload(b), batch, in_c, in_h, in_w, out_c, k, k, stride, padding),
               expected.shape), expected)
    close(read(dev.conv2d_grad_input(g, upload(w), batch, in_c, in_h, in_w, out_c, out_h, out_w, k, k, stride,
                                     padding), x.shape), gx)
    close(read(dev.conv2d_grad_weight(upload(x), g, batch, in_c, in_h, in_w, out_c, out_h, out_w, k, k,
                                      stride, padding, 1, 1), w.shape), gw)
