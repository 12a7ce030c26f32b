"""Every recorded op's gradients on the Tape against torch.autograd (float64, CPU) on
random data of odd sizes, then central finite differences of the Tape's own loss.

Each case builds the same graph twice: on a Tape (flat buffers, Layer-0 argument
order) and in torch (shaped tensors). The `against_torch` fixture takes mse_loss of the
output against one random target on both sides and compares output, loss and the
gradient of every input."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anygpu.autograd import Tape, rules


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def pair(value):
    return value if isinstance(value, tuple) else (value, value)


# ---------------------------------------------------------------- elementwise and products

ELEMENTWISE = {
    "add": (2, lambda t, a, b: t.add(a, b), lambda a, b: a + b),
    "sub": (2, lambda t, a, b: t.sub(a, b), lambda a, b: a - b),
    "mul": (2, lambda t, a, b: t.mul(a, b), lambda a, b: a * b),
    "scale": (1, lambda t, a: t.scale(a, -1.7), lambda a: a * -1.7),
    "relu": (1, lambda t, a: t.relu(a), torch.relu),
    "sigmoid": (1, lambda t, a: t.sigmoid(a), torch.sigmoid),
    "swish": (1, lambda t, a: t.swish(a), F.silu),
    "tanh_act": (1, lambda t, a: t.tanh_act(a), torch.tanh),
}


@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
def test_elementwise(rng, name, against_torch):
    arity, tape_build, torch_build = ELEMENTWISE[name]
    against_torch(tape_build, torch_build, [randn(rng, 37) for _ in range(arity)])


@pytest.mark.parametrize("m, n, k", [(5, 7, 3), (67, 65, 9), (1, 1, 2)])
def test_matmul(rng, m, n, k, against_torch):
    against_torch(lambda t, a, b: t.matmul(a, b, m, n, k), torch.matmul,
                  [randn(rng, m, k), randn(rng, k, n)])


def test_batch_matmul(rng, against_torch):
    batch, m, n, k = 3, 5, 6, 7
    against_torch(lambda t, a, b: t.batch_matmul(a, b, batch, m, n, k), torch.bmm,
                  [randn(rng, batch, m, k), randn(rng, batch, k, n)])


@pytest.mark.parametrize("outer, d0, d1, inner", [(2, 3, 5, 4), (1, 7, 3, 1)])
def test_transpose(rng, outer, d0, d1, inner, against_torch):
    against_torch(lambda t, a: t.transpose(a, outer, d0, d1, inner),
                  lambda a: a.transpose(1, 2), [randn(rng, outer, d0, d1, inner)])


@pytest.mark.parametrize("outer, a_inner, b_inner", [(3, 4, 5), (1, 7, 1), (4, 0, 3)])
def test_concat(rng, outer, a_inner, b_inner, against_torch):
    against_torch(lambda t, a, b: t.concat(a, b, outer, a_inner, b_inner),
                  lambda a, b: torch.cat([a, b], dim=1),
                  [randn(rng, outer, a_inner), randn(rng, outer, b_inner)])


def test_add_broadcast(rng, against_torch):
    outer, inner = 6, 5
    against_torch(lambda t, a, b: t.add_broadcast(a, b, outer, inner),
                  lambda a, b: a + b[:, None], [randn(rng, outer, inner), randn(rng, outer)])


def test_add_per_col(rng, against_torch):
    rows, cols = 5, 7
    against_torch(lambda t, a, b: t.add_per_col(a, b, rows, cols),
                  lambda a, b: a + b, [randn(rng, rows, cols), randn(rng, cols)])


def test_mse_loss_inside_the_graph(rng, against_torch):
    # mse_loss(pred, target) then the helper's mse_loss: a gradient other than 1 reaches it,
    # and both pred and target get gradients.
    against_torch(lambda t, p, q: t.mse_loss(p, q), F.mse_loss,
                  [randn(rng, 13), randn(rng, 13)])


# ---------------------------------------------------------------- softmax and attention

@pytest.mark.parametrize("rows, cols", [(5, 11), (2, 300), (3, 1)])
def test_softmax(rng, rows, cols, against_torch):
    against_torch(lambda t, x: t.softmax(x, rows, cols), lambda x: torch.softmax(x, dim=1),
                  [3 * randn(rng, rows, cols)])


@pytest.mark.parametrize("batch_heads, seq_len, d_k", [(3, 5, 7), (2, 9, 3), (1, 1, 4)])
def test_scaled_dot_product_attention(rng, batch_heads, seq_len, d_k, against_torch):
    against_torch(lambda t, q, k, v: t.scaled_dot_product_attention(q, k, v, batch_heads, seq_len, d_k),
                  F.scaled_dot_product_attention,
                  [randn(rng, batch_heads, seq_len, d_k) for _ in range(3)])


# ---------------------------------------------------------------- images

# batch, in_c, in_h, in_w, out_c, (kh, kw), stride, padding, dilation, groups, bias
CONV2D = {
    # (8 + 2 - 2 - 1) mod 2 = 1: out_h floors, yet the input gradient must be 8x8.
    "stride2_pad1_even_input": (2, 3, 8, 8, 4, (3, 3), 2, 1, 1, 1, True),
    "dilation2": (1, 2, 7, 9, 3, (3, 3), 1, 2, 2, 1, False),
    "groups2": (2, 4, 5, 6, 6, (3, 3), 1, 1, 1, 2, True),
    "depthwise_multiplier2": (1, 3, 7, 7, 6, (3, 3), 2, 1, 1, 3, True),
    "rect_stride_mod_nonzero": (1, 2, 8, 7, 3, (3, 2), (3, 2), (1, 0), 1, 1, True),
    "dilated_strided_grouped": (2, 4, 9, 10, 4, (2, 3), (2, 3), (1, 2), (2, 1), 2, False),
}


@pytest.mark.parametrize("name", sorted(CONV2D))
def test_conv2d(rng, name, against_torch):
    batch, in_c, in_h, in_w, out_c, (kh, kw), stride, padding, dilation, groups, bias = CONV2D[name]
    inputs = [randn(rng, batch, in_c, in_h, in_w), randn(rng, out_c, in_c // groups, kh, kw)]
    if bias:
        inputs.append(randn(rng, out_c))

    def tape_build(t, x, w, b=None):
        return t.conv2d(x, w, b, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups)

    def torch_build(x, w, b=None):
        return F.conv2d(x, w, b, pair(stride), pair(padding), pair(dilation), groups)

    against_torch(tape_build, torch_build, inputs)


# batch, in_c, in_h, in_w, out_c, (kh, kw), stride, padding, output_padding, dilation, groups, bias
CONV_TRANSPOSE2D = {
    "stride2_output_padding1": (2, 3, 4, 5, 4, (3, 3), 2, 1, 1, 1, 1, True),
    "groups_dilation": (1, 4, 5, 4, 6, (3, 3), 2, 2, 1, 2, 2, False),
    # output_padding >= stride (allowed because dilation is larger): the backward crops/pads.
    "output_padding_past_stride": (1, 2, 5, 5, 3, (3, 3), 1, 1, 1, 2, 1, True),
    "rect": (1, 2, 3, 4, 2, (2, 3), (3, 2), (0, 1), (2, 1), 1, 1, True),
    "depthwise": (2, 3, 3, 3, 3, (4, 4), 2, 1, 0, 1, 3, True),
}


@pytest.mark.parametrize("name", sorted(CONV_TRANSPOSE2D))
def test_conv_transpose2d(rng, name, against_torch):
    (batch, in_c, in_h, in_w, out_c, (kh, kw), stride, padding, output_padding, dilation, groups,
     bias) = CONV_TRANSPOSE2D[name]
    inputs = [randn(rng, batch, in_c, in_h, in_w), randn(rng, in_c, out_c // groups, kh, kw)]
    if bias:
        inputs.append(randn(rng, out_c))

    def tape_build(t, x, w, b=None):
        return t.conv_transpose2d(x, w, b, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding,
                                  output_padding, dilation, groups)

    def torch_build(x, w, b=None):
        return F.conv_transpose2d(x, w, b, pair(stride), pair(padding), pair(output_padding), groups,
                                  pair(dilation))

    against_torch(tape_build, torch_build, inputs)


@pytest.mark.parametrize("batch, channels, spatial, groups", [(2, 6, 5, 3), (3, 4, 1, 1), (2, 4, 9, 4)])
def test_group_norm(rng, batch, channels, spatial, groups, against_torch):
    eps = 1e-5
    against_torch(
        lambda t, x, g, b: t.group_norm(x, g, b, batch, channels, spatial, groups, eps),
        lambda x, g, b: F.group_norm(x, groups, g, b, eps),
        [randn(rng, batch, channels, spatial) * 2 + 1, 1 + 0.5 * randn(rng, channels), randn(rng, channels)],
        rtol=2e-4)


@pytest.mark.parametrize("batch, channels, in_h, in_w, scale_h, scale_w", [(2, 3, 3, 4, 2, 3), (1, 2, 5, 5, 1, 2)])
def test_upsample_nearest2d(rng, batch, channels, in_h, in_w, scale_h, scale_w, against_torch):
    against_torch(
        lambda t, x: t.upsample_nearest2d(x, batch, channels, in_h, in_w, scale_h, scale_w),
        lambda x: F.interpolate(x, scale_factor=(scale_h, scale_w), mode="nearest"),
        [randn(rng, batch, channels, in_h, in_w)])


# ---------------------------------------------------------------- whole graphs

def test_small_unet_block_reusing_its_input(rng, against_torch):
    """conv (stride 2) -> group_norm -> swish -> upsample -> concat with the input ->
    conv_transpose -> tanh: the input feeds two branches, so its gradients add up."""
    n, c, h, w = 2, 3, 8, 8

    def tape_build(t, x, w1, b1, gamma, beta, w2, b2):
        y = t.conv2d(x, w1, b1, n, c, h, w, 4, 3, 3, 2, 1, 1, 1)           # [2, 4, 4, 4]
        y = t.swish(t.group_norm(y, gamma, beta, n, 4, 16, 2, 1e-5))
        y = t.upsample_nearest2d(y, n, 4, 4, 4, 2, 2)                       # [2, 4, 8, 8]
        y = t.concat(y, x, n, 4 * h * w, c * h * w)                         # [2, 7, 8, 8]
        return t.tanh_act(t.conv_transpose2d(y, w2, b2, n, 7, h, w, 2, 3, 3, 1, 1, 0, 1, 1))

    def torch_build(x, w1, b1, gamma, beta, w2, b2):
        y = F.conv2d(x, w1, b1, 2, 1)
        y = F.silu(F.group_norm(y, 2, gamma, beta, 1e-5))
        y = F.interpolate(y, scale_factor=2, mode="nearest")
        y = torch.cat([y, x], dim=1)
        return torch.tanh(F.conv_transpose2d(y, w2, b2, 1, 1))

    inputs = [randn(rng, n, c, h, w), 0.3 * randn(rng, 4, c, 3, 3), randn(rng, 4), 1 + 0.1 * randn(rng, 4),
              randn(rng, 4), 0.2 * randn(rng, 7, 2, 3, 3), randn(rng, 2)]
    against_torch(tape_build, torch_build, inputs, rtol=3e-4)


def test_mlp_with_attention_and_softmax(rng, against_torch):
    """linear + bias -> relu -> attention with q, k and v all one value -> transpose ->
    linear -> softmax."""
    rows, d_in, hidden, out = 6, 5, 4, 3

    def tape_build(t, x, w1, b1, w2):
        h = t.relu(t.add_per_col(t.matmul(x, w1, rows, hidden, d_in), b1, rows, hidden))
        a = t.scaled_dot_product_attention(h, h, h, 2, rows // 2, hidden)     # [2, 3, 4]
        a = t.transpose(a, 1, 2, rows // 2 * hidden, 1)                        # [12, 2], read as [6, 4]
        return t.softmax(t.matmul(a, w2, rows, out, hidden), rows, out)

    def torch_build(x, w1, b1, w2):
        h = torch.relu(x @ w1 + b1).reshape(2, rows // 2, hidden)
        a = F.scaled_dot_product_attention(h, h, h)
        a = a.reshape(2, rows // 2 * hidden).t().reshape(rows, hidden)
        return torch.softmax(a @ w2, dim=1)

    inputs = [randn(rng, rows, d_in), randn(rng, d_in, hidden), randn(rng, hidden), randn(rng, hidden, out)]
    against_torch(tape_build, torch_build, inputs, rtol=3e-4)


# ---------------------------------------------------------------- finite differences

def conv2d_mod_stride(t, x, w, b):
    # 1x2x6x6 input, 3x3 kernel, stride 2, no padding: (6 - 2 - 1) mod 2 = 1, so the
    # window never reads the last row and column.
    return t.conv2d(x, w, b, 1, 2, 6, 6, 3, 3, 3, 2, 0, 1, 1)


FD_CASES = {
    "conv2d_mod_stride": (conv2d_mod_stride, [(72,), (54,), (3,)]),
    "conv_transpose2d_output_padding": (
        lambda t, x, w, b: t.conv_transpose2d(x, w, b, 1, 2, 3, 4, 2, 3, 3, 2, 1, 1, 1, 1), [(24,), (36,), (2,)]),
    "group_norm": (lambda t, x, g, b: t.group_norm(x, g, b, 2, 4, 3, 2, 1e-5), [(24,), (4,), (4,)]),
    "attention": (lambda t, q, k, v: t.scaled_dot_product_attention(q, k, v, 2, 3, 4), [(24,), (24,), (24,)]),
    "softmax_of_product": (lambda t, a, b: t.softmax(t.matmul(a, b, 3, 5, 4), 3, 5), [(12,), (20,)]),
}


def output_size(dev, build, inputs):
    tape = Tape(dev)
    return len(tape.read(build(tape, *[tape.leaf(x) for x in inputs])))


@pytest.mark.parametrize("name", sorted(FD_CASES))
def test_directional_finite_differences(dev, rng, name, finite_differences):
    build, shapes = FD_CASES[name]
    inputs = [randn(rng, *shape) for shape in shapes]
    target = randn(rng, output_size(dev, build, inputs))
    for analytic, numeric in finite_differences(build, inputs, target, eps=1e-2, directions=3):
        assert abs(analytic - numeric) <= 2e-2 * abs(analytic) + 2e-3, f"analytic {analytic}, numeric {numeric}"


def test_conv2d_mod_stride_every_coordinate_by_finite_differences(dev, rng, run_tape):
    """Every input, weight and bias coordinate of a strided conv whose window skips the
    last row and column: those inputs must get exactly zero gradient."""
    inputs = [randn(rng, 72), randn(rng, 54), randn(rng, 3)]
    target = randn(rng, output_size(dev, conv2d_mod_stride, inputs))
    _, _, grads = run_tape(conv2d_mod_stride, inputs, target)
    eps = 1e-2
    for which, x in enumerate(inputs):
        for i in range(x.size):
            losses = []
            for sign in (1.0, -1.0):
                moved = [v.copy() for v in inputs]
                moved[which][i] = np.float32(float(x[i]) + sign * eps)
                losses.append(float(run_tape(conv2d_mod_stride, moved, target)[1]))
            numeric = (losses[0] - losses[1]) / (2 * eps)
            assert abs(grads[which][i] - numeric) <= 1e-2 * abs(numeric) + 1e-3, (which, i, grads[which][i], numeric)
    grad_input = grads[0].reshape(2, 6, 6)
    np.testing.assert_array_equal(grad_input[:, 5, :], 0.0)   # never read: exactly zero
    np.testing.assert_array_equal(grad_input[:, :, 5], 0.0)


# ---------------------------------------------------------------- rules used on their own

def test_rules_skip_gradients_nobody_needs(dev, rng):
    a = dev.upload(randn(rng, 4, 3))
    b = dev.upload(randn(rng, 3, 2))
    grad_out = dev.upload(randn(rng, 4, 2))
    grad_a, grad_b = rules.RULES["matmul"](dev, grad_out, a, b, 4, 2, 3, needs=(False, True))
    assert grad_a is None
    np.testing.assert_allclose(dev.read(grad_b).reshape(3, 2),
                               dev.read(a).reshape(4, 3).T @ dev.read(grad_out).reshape(4, 2), rtol=1e-5)
    x = dev.upload(randn(rng, 1 * 2 * 5 * 5))
    w = dev.upload(randn(rng, 3 * 2 * 3 * 3))
    g = dev.upload(randn(rng, 1 * 3 * 3 * 3))
    grads = rules.RULES["conv2d"](dev, g, x, w, 1, 2, 5, 5, 3, 3, 3, (2, 2), (1, 1), (1, 1), 1,
                                  needs=(True, False, False))
    assert grads[0].len == 50 and grads[1] is None and grads[2] is None


# ---------------------------------------------------------------- random geometries

@st.composite
def conv_geometry(draw, transposed: bool):
    """A conv2d (or conv_transpose2d) geometry whose output is at least 1x1."""
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    geometry = {"batch": draw(st.integers(1, 2)), "groups": groups,
                "in_c": groups * draw(st.integers(1, 2)), "out_c": groups * draw(st.integers(1, 2)),
                "bias": draw(st.booleans())}
    for axis in ("h", "w"):
        k = draw(st.integers(1, 4))
        stride = draw(st.integers(1, 3))
        dilation = draw(st.integers(1, 2))
        padding = draw(st.integers(0, 2))
        span = dilation * (k - 1) + 1
        if transposed:
            output_padding = draw(st.integers(0, max(stride, dilation) - 1))
            low = max(1, -(-(2 * padding - span - output_padding + 1) // stride) + 1)
            geometry["output_padding_" + axis] = output_padding
        else:
            low = max(1, span - 2 * padding)
        geometry.update({"k" + axis: k, "stride_" + axis: stride, "dilation_" + axis: dilation,
                         "padding_" + axis: padding, "in_" + axis: draw(st.integers(low, low + 5))})
    return geometry


def _pairs(g, *names):
    return [(g[name + "_h"], g[name + "_w"]) for name in names]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=conv_geometry(transposed=False), seed=st.integers(0, 2**32 - 1))
def test_conv2d_random_geometry(against_torch, g, seed):
    rng = np.random.default_rng(seed)
    stride, padding, dilation = _pairs(g, "stride", "padding", "dilation")
    sizes = (g["batch"], g["in_c"], g["in_h"], g["in_w"], g["out_c"], g["kh"], g["kw"])
    inputs = [randn(rng, g["batch"], g["in_c"], g["in_h"], g["in_w"]),
              randn(rng, g["out_c"], g["in_c"] // g["groups"], g["kh"], g["kw"])]
    inputs += [randn(rng, g["out_c"])] if g["bias"] else []
    against_torch(lambda t, x, w, b=None: t.conv2d(x, w, b, *sizes, stride, padding, dilation, g["groups"]),
                  lambda x, w, b=None: F.conv2d(x, w, b, stride, padding, dilation, g["groups"]), inputs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(g=conv_geometry(transposed=True), seed=st.integers(0, 2**32 - 1))
def test_conv_transpose2d_random_geometry(against_torch, g, seed):
    rng = np.random.default_rng(seed)
    stride, padding, output_padding, dilation = _pairs(g, "stride", "padding", "output_padding", "dilation")
    sizes = (g["batch"], g["in_c"], g["in_h"], g["in_w"], g["out_c"], g["kh"], g["kw"])
    inputs = [randn(rng, g["batch"], g["in_c"], g["in_h"], g["in_w"]),
              randn(rng, g["in_c"], g["out_c"] // g["groups"], g["kh"], g["kw"])]
    inputs += [randn(rng, g["out_c"])] if g["bias"] else []
    against_torch(lambda t, x, w, b=None: t.conv_transpose2d(x, w, b, *sizes, stride, padding, output_padding,
                                                            dilation, g["groups"]),
                  lambda x, w, b=None: F.conv_transpose2d(x, w, b, stride, padding, output_padding,
                                                          g["groups"], dilation), inputs)
