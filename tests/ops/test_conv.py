"""conv2d, conv_transpose2d and conv2d's gradients against torch on the CPU."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from anygpu.ops.conv import conv_output_size

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
                                         *stride, *padding, *dilation, groups)
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
                                         k, k, 1, 1, 1, 1, 1, 1, 1)
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


def test_conv2d_large_batch_folds_the_grid(dev, rng, upload, read, close):
    """More output tiles than fit in one grid dimension would on a smaller limit: the
    linear tile index must come back right across the fold."""
    batch, in_c, size, out_c = 1, 1, 2100, 1
    tiles = -(-batch * size * size // 64)
    assert tiles > 65535
    x = rng.standard_normal((batch, in_c, size, size)).astype(np.float32)
    w = rng.standard_normal((out_c, in_c, 1, 1)).astype(np.float32)
    out = read(dev.conv2d(upload(x), upload(w), None, batch, in_c, size, size, out_c, 1, 1), x.shape)
    close(out, x * w[0, 0, 0, 0])
