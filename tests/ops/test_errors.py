"""Bad arguments: every op refuses a wrong-size buffer before any GPU work, with a
ValueError naming the op and both sizes, and the device stays usable afterwards."""

import gc
import re

import numpy as np
import pytest


def _buffers(dev, *sizes):
    return [dev.upload(np.linspace(-1, 1, n, dtype=np.float32)) for n in sizes]


# op -> (sizes of the buffers to pass, the other arguments, index of the bad buffer,
#        its correct size). The bad buffer gets one element too many. (Unary ops and
#        sum_all take any length, so they have no wrong size.)
CASES = {
    "add": ((5, 5), (), 1, 5),
    "sub": ((5, 5), (), 0, 5),
    "mul": ((5, 5), (), 1, 5),
    "relu_backward": ((5, 5), (), 1, 5),
    "sigmoid_backward": ((5, 5), (), 0, 5),
    "swish_backward": ((5, 5), (), 1, 5),
    "tanh_backward": ((5, 5), (), 0, 5),
    "matmul": ((6, 12), (2, 4, 3), 1, 12),
    "batch_matmul": ((12, 24), (2, 2, 4, 3), 0, 12),
    "transpose": ((24,), (2, 3, 4, 1), 0, 24),
    "conv2d": ((2 * 3 * 6 * 6, 4 * 3 * 3 * 3, 4), (2, 3, 6, 6, 4, 3, 3, 1, 0, 1, 1), 0, 216),
    "conv_transpose2d": ((2 * 3 * 4 * 4, 3 * 4 * 3 * 3, 4), (2, 3, 4, 4, 4, 3, 3, 2, 1, 1, 1, 1), 1, 108),
    "conv2d_grad_input": ((2 * 4 * 4 * 4, 4 * 3 * 3 * 3), (2, 3, 6, 6, 4, 4, 4, 3, 3, 1, 0, 1, 1), 0, 128),
    "conv2d_grad_weight": ((2 * 3 * 6 * 6, 2 * 4 * 4 * 4),
                           (2, 3, 6, 6, 4, 4, 4, 3, 3, 1, 0, 1, 1), 1, 128),
    "conv2d_grad_bias": ((2 * 4 * 4 * 4,), (2, 4, 4, 4), 0, 128),
    "group_norm": ((2 * 4 * 9, 4, 4), (2, 4, 9, 2, 1e-5), 2, 4),
    "group_norm_backward": ((72, 72, 4), (2, 4, 9, 2, 1e-5), 1, 72),
    "concat": ((6, 9), (3, 2, 3), 1, 9),
    "add_broadcast": ((12, 3), (3, 4), 1, 3),
    "add_per_col": ((12, 4), (3, 4), 0, 12),
    "sum_rows": ((12,), (3, 4), 0, 12),
    "sum_inner": ((12,), (3, 4), 0, 12),
    "softmax": ((12,), (3, 4), 0, 12),
    "softmax_backward": ((12, 12), (3, 4), 1, 12),
    "attention_probs": ((24, 24), (2, 3, 4), 1, 24),
    "scaled_dot_product_attention": ((24, 24, 24), (2, 3, 4), 2, 24),
    "attention_backward": ((24, 24, 24, 24), (2, 3, 4), 0, 24),
    "upsample_nearest2d": ((2 * 3 * 4,), (1, 2, 3, 4, 2, 2), 0, 24),
    "upsample_nearest2d_backward": ((96,), (1, 2, 3, 4, 2, 2), 0, 96),
    "mse_loss": ((7, 7), (), 1, 7),
}


@pytest.mark.parametrize("op", CASES)
def test_wrong_size_buffer_names_op_and_both_sizes(dev, op):
    sizes, args, bad, expected = CASES[op]
    sizes = list(sizes)
    sizes[bad] += 1
    buffers = _buffers(dev, *sizes)
    dispatches = dev.stats["dispatches"]
    with pytest.raises(ValueError) as info:
        getattr(dev, op)(*buffers, *args)
    message = str(info.value)
    assert message.startswith(f"{op}:"), message
    assert re.search(rf"\b{expected + 1}\b", message) and re.search(rf"\b{expected}\b", message), message
    assert dev.stats["dispatches"] == dispatches, "a dispatch was recorded before the check"


@pytest.mark.parametrize("call, message", [
    (lambda dev, b: dev.conv2d(b(2 * 6 * 5 * 5), b(4 * 2 * 3 * 3), None, 2, 6, 5, 5, 4, 3, 3, 1, 0, 1, 4),
     "conv2d: in_c = 6 is not divisible by groups = 4"),
    (lambda dev, b: dev.conv2d(b(2 * 6 * 5 * 5), b(5 * 2 * 3 * 3), None, 2, 6, 5, 5, 5, 3, 3, 1, 0, 1, 3),
     "conv2d: out_c = 5 is not divisible by groups = 3"),
    (lambda dev, b: dev.conv_transpose2d(b(16), b(16), None, 1, 4, 2, 2, 6, 2, 2, 1, 0, 0, 1, 3),
     "conv_transpose2d: in_c = 4 is not divisible by groups = 3"),
    (lambda dev, b: dev.group_norm(b(2 * 6 * 4), b(6), b(6), 2, 6, 4, 4, 1e-5),
     "group_norm: channels = 6 is not divisible by groups = 4"),
    (lambda dev, b: dev.conv2d(b(25), b(49), None, 1, 1, 5, 5, 1, 7, 7),
     "conv2d: output would be -1x-1"),
    (lambda dev, b: dev.conv_transpose2d(b(9), b(9), None, 1, 1, 3, 3, 1, 3, 3, 2, 0, 2, 1, 1),
     "conv_transpose2d: output_padding"),
    (lambda dev, b: dev.conv2d_grad_weight(b(36), b(16), 1, 1, 6, 6, 1, 4, 3, 3, 3, 1, 0, 1, 1),
     "conv2d_grad_weight: out_h x out_w is 4x3, expected 4x4"),
    (lambda dev, b: dev.conv2d(b(16), b(9), None, 1, 1, 4, 4, 1, 3, 3, (0, 1), 0, 1, 1),
     "conv2d: stride must be >= 1"),
    (lambda dev, b: dev.softmax(b(0), 0, 4), "softmax: rows must be a positive integer"),
    (lambda dev, b: dev.mse_loss(b(0), b(0)), "mse_loss: pred and target are empty"),
    (lambda dev, b: dev.concat(b(4), [1.0, 2.0], 2, 2, 1), "concat: b must be a Buffer"),
])
def test_bad_arguments_are_refused(dev, call, message):
    def buffer(n):
        return dev.upload(np.ones(n, np.float32))
    with pytest.raises(ValueError, match=re.escape(message)):
        call(dev, buffer)


def test_device_still_works_after_errors(dev, rng, upload, read, close):
    errors = []
    for op in CASES:
        sizes, args, bad, _ = CASES[op]
        sizes = list(sizes)
        sizes[bad] += 3
        with pytest.raises(ValueError) as info:
            getattr(dev, op)(*_buffers(dev, *sizes), *args)
        errors.append(info)
    # Each kept traceback holds the failed call's Buffers in a reference cycle; collecting
    # them must return their memory to the pool intact, not as released wgpu buffers.
    del errors, info
    gc.collect()
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    out = read(dev.conv2d(upload(x), upload(w), None, 2, 3, 5, 5, 4, 3, 3, 1, 1, 1, 1), (2, 4, 5, 5))
    assert np.all(np.isfinite(out)) and np.abs(out).sum() > 0
    close(read(dev.softmax(upload([[1.0, 2.0, 3.0]]), 1, 3)), np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum())
