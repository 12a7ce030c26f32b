"""Elementwise epilogues of convolutions (ops/conv.py, ops/conv_gen.py over matmul_gen.Epilogue):
conv2d and conv_transpose2d (so conv2d's input gradient) are deferred like products, and the
elementwise ops that read the result before other work comes (a ReLU; the ReLU's backward
applied to an input gradient) are folded into the kernel's store after the bias, in every
kernel form (implicit GEMM, direct). Results equal the op-by-op path (`dev.fuse = False`)
bit for bit and torch CPU within float32 rounding, forward and backward; a CNN training step
takes fewer dispatches."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn
from anygpu.nn import functional as F
from anygpu.ops import conv_gen, conv_tune, fusion
from anygpu.ops.conv import _launch_conv_transpose
from anygpu.ops.conv_gen import ConvTiles, DirectTiles
from test_fusion import _assert_same_bits as _same_bits  # bits, NaN's sign aside
from test_fusion import _Fuse
from test_matmul_epilogue import train_fused_and_op_by_op

# (batch, in_c, h, w, mid_c, out_c, kernel, stride, padding, dilation, groups): conv 1 takes
# in_c -> mid_c (stride 1, so the tuner may pick the direct form), conv 2 mid_c -> out_c
# with the rest; odd sizes, strides, dilation and groups.
LAYERS = [
    (2, 3, 9, 7, 5, 7, 3, 1, 1, 1, 1),
    (3, 4, 11, 10, 6, 9, 3, 2, 1, 1, 3),
    (1, 2, 13, 12, 8, 4, (3, 2), (2, 1), (2, 0), (2, 1), 2),
    (5, 1, 8, 8, 16, 32, 3, 1, 1, 1, 1),  # the digits CNN's layers
    (2, 6, 10, 9, 12, 12, 1, 2, 0, 1, 4),
]


def _two_convs(x, w1, b1, w2, b2, conv, relu, stride, padding, dilation, groups):
    """relu(conv(relu(conv(x, w1, b1)), w2, b2)): the second conv's input gradient meets the
    first ReLU's backward."""
    h = relu(conv(x, w1, b1, padding=1))
    return relu(conv(h, w2, b2, stride=stride, padding=padding, dilation=dilation, groups=groups))


@pytest.mark.parametrize("layers", LAYERS)
def test_conv_bias_relu_forward_and_gradients_match_torch_and_op_by_op(dev, layers):
    batch, in_c, h, w, mid_c, out_c, k, stride, padding, dilation, groups = layers
    kh, kw = (k, k) if isinstance(k, int) else k
    rng = np.random.default_rng(in_c * 100 + out_c)
    x = rng.standard_normal((batch, in_c, h, w)).astype(np.float32)
    w1 = (rng.standard_normal((mid_c, in_c, 3, 3)) / np.sqrt(9 * in_c)).astype(np.float32)
    b1 = rng.standard_normal(mid_c).astype(np.float32) * 0.3
    w2 = (rng.standard_normal((out_c, mid_c // groups, kh, kw)) / np.sqrt(kh * kw * mid_c)).astype(np.float32)
    b2 = rng.standard_normal(out_c).astype(np.float32) * 0.3
    args = (stride, padding, dilation, groups)
    results = {}
    for fuse in (True, False):
        with _Fuse(dev, fuse):
            first = dict(dev.stats)
            tensors = [ag.tensor(v, requires_grad=True) for v in (x, w1, b1, w2, b2)]
            y = _two_convs(*tensors, F.conv2d, F.relu, *args)
            g = ag.tensor(rng.standard_normal(y.shape).astype(np.float32) if fuse else results[True][-1])
            y.backward(g)
            results[fuse] = [y.detach().numpy()] + [t.grad.numpy() for t in tensors] + [g.numpy()]
            if fuse:  # two ReLUs forward, one ReLU backward in a conv's store
                assert dev.stats["fused_ops"] - first["fused_ops"] >= 3
    for got, plain, name in zip(results[True], results[False], ("y", "dx", "dw1", "db1", "dw2", "db2")):
        _same_bits(got, plain, name)
    tensors = [torch.tensor(v, requires_grad=True) for v in (x, w1, b1, w2, b2)]
    ty = _two_convs(*tensors, torch.nn.functional.conv2d, torch.relu, *args)
    ty.backward(torch.tensor(results[True][-1]))
    np.testing.assert_allclose(results[True][0], ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    for got, want, name in zip(results[True][1:], tensors, ("dx", "dw1", "db1", "dw2", "db2")):
        scale = np.abs(want.grad.numpy()).max() + 1e-6
        np.testing.assert_allclose(got, want.grad.numpy(), rtol=1e-4, atol=2e-5 * scale, err_msg=name)


def _chain(dev, value, other):
    """Elementwise work on a convolution's result: a held intermediate with a scalar, the
    result as b of a binary op, another scalar op, an extra input, a value read later."""
    held = dev.unary("scale", value, 0.75)
    t = dev.unary("clamp", dev.binary("mul", other, held), -3.0, 2.5)
    t = dev.binary("relu_backward", dev.unary("tanh", t), other)
    late = dev.unary("exp", held)
    return [held, t, late]


def _inputs(rng, *shapes):
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    arrays[0].flat[:4] = [np.nan, np.inf, -np.inf, -0.0]  # poison a few outputs
    arrays[-1].flat[::5] = np.resize(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0], np.float32),
                                     arrays[-1].flat[::5].size)
    return arrays


# Every form the conv2d tuner can pick for a 3x3 layer of 13 -> 24 channels: its heuristic
# fallback, implicit-GEMM tiles of 4 and 8 rows per thread, tile_k 8 and 16, direct tiles.
_LAYER = (2, 13, 11, 10, 24, 3, 3)
_FORMS = [None, ConvTiles(32, 64, 4, 8, 8), ConvTiles(64, 64, 8, 8, 16), DirectTiles(16, 4, 8, 2, 4, 4),
          DirectTiles(32, 8, 4, 3, 2, 8)]


@pytest.mark.parametrize("tiles", _FORMS, ids=lambda t: "fallback" if t is None else t.name)
def test_every_conv2d_form_takes_the_epilogue_bit_for_bit(dev, tiles):
    batch, in_c, h, w, out_c, kh, kw = _LAYER
    rng = np.random.default_rng(5)
    x, weight, bias, other = _inputs(rng, (batch, in_c, h, w), (out_c, in_c, kh, kw), out_c, (batch, out_c, h, w))
    if tiles is None:
        problem = ("f32", batch, in_c, h, w, out_c, kh, kw, (1, 1), (1, 1), (1, 1), 1)
        tiles = conv_tune.TUNABLES["conv2d"].candidates(dev, problem)[0]
    results = {}
    for fuse in (True, False):
        with _Fuse(dev, fuse):
            first = dict(dev.stats)
            bufs = [dev.upload(v) for v in (x, weight, bias, other)]
            out = dev.conv2d(bufs[0], bufs[1], bufs[2], batch, in_c, h, w, out_c, kh, kw, 1, 1, 1, 1, tiles=tiles)
            results[fuse] = [dev.read(v) for v in [out, *_chain(dev, out, bufs[3])]]
            if fuse:
                assert dev.stats["fused_kernels"] - first["fused_kernels"] == 1
                assert dev.stats["dispatches"] - first["dispatches"] == 2  # the conv, then exp
    for i, (got, plain) in enumerate(zip(results[True], results[False])):
        _same_bits(got, plain, f"value {i}")
    want = torch.nn.functional.conv2d(torch.tensor(x).double(), torch.tensor(weight).double(),
                                      torch.tensor(bias).double(), padding=1).numpy().ravel()
    finite = np.isfinite(want)
    np.testing.assert_allclose(results[True][0][finite], want[finite], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("stride", [1, 2, (3, 2)])
def test_conv_transpose_phases_take_the_epilogue_bit_for_bit(dev, stride):
    """Each output phase of a strided transposed conv stores through the same epilogue."""
    batch, in_c, h, w, out_c, kh, kw = 2, 5, 6, 7, 9, 3, 3
    stride = (stride, stride) if isinstance(stride, int) else stride
    out_h, out_w = (h - 1) * stride[0] - 2 + kh, (w - 1) * stride[1] - 2 + kw
    rng = np.random.default_rng(stride[0])
    x, weight, bias, other = _inputs(rng, (batch, in_c, h, w), (in_c, out_c, kh, kw), out_c,
                                     (batch, out_c, out_h, out_w))
    results = {}
    for fuse in (True, False):
        with _Fuse(dev, fuse):
            bufs = [dev.upload(v) for v in (x, weight, bias, other)]
            out = dev.conv_transpose2d(bufs[0], bufs[1], bufs[2], batch, in_c, h, w, out_c, kh, kw, stride, 1)
            results[fuse] = [dev.read(v) for v in [out, *_chain(dev, out, bufs[3])]]
    for i, (got, plain) in enumerate(zip(results[True], results[False])):
        _same_bits(got, plain, f"value {i}")
    want = torch.nn.functional.conv_transpose2d(torch.tensor(x).double(), torch.tensor(weight).double(),
                                                torch.tensor(bias).double(), stride=stride, padding=1)
    want = want.numpy().ravel()
    finite = np.isfinite(want)
    np.testing.assert_allclose(results[True][0][finite], want[finite], rtol=1e-4, atol=1e-5)


def test_a_chain_past_the_uniform_room_ends_and_the_rest_still_runs(dev):
    """conv_transpose2d's parameters leave room for 28 epilogue scalars: a chain of clamps
    (two each) ends before it would overflow the 256-byte uniform slot."""
    assert conv_gen.epilogue_room("conv_transpose2d") == 28 < fusion.MAX_EPILOGUE_PARAMS
    rng = np.random.default_rng(9)
    x, weight = rng.standard_normal((1, 3, 5, 5)).astype(np.float32), rng.standard_normal((3, 4, 3, 3)).astype(np.float32)
    results = {}
    for fuse in (True, False):
        with _Fuse(dev, fuse):
            first = dict(dev.stats)
            t = _launch_conv_transpose(dev, dev.upload(x), dev.upload(weight), None, 1, 3, 5, 5, 4, 7, 7, 3, 3,
                                       (1, 1), (0, 0), (1, 1), 1)
            for k in range(16):
                t = dev.unary("clamp", t, -4.0 + k * 0.1, 4.0 - k * 0.2)
            results[fuse] = dev.read(t)
            if fuse:
                assert dev.stats["fused_ops"] - first["fused_ops"] == 16  # 14 in the store, 2 fused after
                assert dev.stats["dispatches"] - first["dispatches"] == 2
    _same_bits(results[True], results[False])


def test_epilogue_pipelines_are_cached_by_structure(dev):
    rng = np.random.default_rng(2)
    x, weight = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    bx, bw = dev.upload(x), dev.upload(weight)

    def run(alpha):
        return dev.read(dev.unary("leaky_relu", dev.conv2d(bx, bw, None, 2, 3, 6, 6, 5, 3, 3, 1, 1), alpha))
    first = run(0.5)
    pipelines = dev.stats["pipelines"]
    other, again = run(2.0), run(0.5)
    assert dev.stats["pipelines"] == pipelines  # another scalar, the same kernel
    _same_bits(again, first)
    want = torch.nn.functional.conv2d(torch.tensor(x), torch.tensor(weight), padding=1)
    np.testing.assert_allclose(other, torch.nn.functional.leaky_relu(want, 2.0).numpy().ravel(), rtol=1e-5, atol=1e-5)


def test_cnn_steps_take_fewer_dispatches_and_train_bit_for_bit_as_op_by_op(dev):
    def build():
        model = nn.Sequential(nn.Conv2d(2, 6, 3, padding=1), nn.ReLU(), nn.Conv2d(6, 10, 3, stride=2, padding=1),
                              nn.ReLU(), nn.Conv2d(10, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                              nn.Linear(8 * 2 * 2, 5))
        return model, ag.optim.Adam(model.parameters(), lr=1e-2)
    fused, plain = train_fused_and_op_by_op(dev, build, (7, 2, 9, 9), 5)
    # The 3 ReLUs join their convolutions' stores forward; backward, the first two ReLUs'
    # backwards join the input gradients of convs 2 and 3 (the last one follows a pool).
    assert fused <= plain - 5, (fused, plain)
