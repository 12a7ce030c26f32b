"""Random shapes and layer settings (hypothesis) through the torch oracle."""

import torch.nn.functional as TF
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import anygpu.nn.functional as F

from .helper import check_op

FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def broadcastable_pair(draw):
    """Two shapes of up to 4 dims that broadcast (each dim equal, or 1 on one side)."""
    ndim = draw(st.integers(1, 4))
    full = draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim))
    a = [1 if draw(st.booleans()) else s for s in full]
    b = [1 if draw(st.booleans()) else s for s in full]
    return tuple(a[draw(st.integers(0, ndim - 1)):]), tuple(b)


@FAST
@given(broadcastable_pair(), st.sampled_from(["add", "sub", "mul", "div"]))
def test_broadcasting_binary_ops(shapes, op):
    fn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
          "div": lambda x, y: x / (y * y + 0.5)}[op]
    check_op(list(shapes), fn, atol=1e-5, rtol=1e-4)


@FAST
@given(st.integers(1, 2), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.integers(0, 1), st.integers(1, 2), st.integers(4, 7), st.integers(4, 7))
def test_conv2d_settings(batch, groups, in_per_group, out_per_group, stride, padding, dilation, height, width):
    kernel = 3
    assume(dilation * (kernel - 1) + 1 <= height + 2 * padding)  # the dilated window fits
    weight = (out_per_group * groups, in_per_group, kernel, kernel - 1)
    x = (batch, in_per_group * groups, height, width)
    check_op([x, weight, (weight[0],)],
             lambda x, w, b: TF.conv2d(x, w, b, stride, padding, dilation, groups),
             lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups), atol=1e-4)


@FAST
@given(st.integers(1, 3), st.integers(1, 2), st.integers(0, 1), st.booleans(), st.booleans(),
       st.integers(4, 8), st.integers(4, 8))
def test_pooling_settings(kernel, stride, padding, ceil_mode, use_max, height, width):
    padding = min(padding, kernel // 2)
    if use_max:
        torch_fn = lambda x: TF.max_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode)  # noqa: E731
        ag_fn = lambda x: F.max_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode)  # noqa: E731
    else:
        torch_fn = lambda x: TF.avg_pool2d(x, kernel, stride, padding, ceil_mode)  # noqa: E731
        ag_fn = lambda x: F.avg_pool2d(x, kernel, stride, padding, ceil_mode)  # noqa: E731
    check_op([(2, 2, height, width)], torch_fn, ag_fn, atol=1e-5)


@FAST
@given(st.lists(st.integers(1, 5), min_size=1, max_size=3), st.data())
def test_slicing(shape, data):
    index = []
    for size in shape:
        start = data.draw(st.integers(-size, size - 1))
        step = data.draw(st.integers(1, 3))
        index.append(slice(start, None, step) if data.draw(st.booleans()) else data.draw(st.integers(-size, size - 1)))
    index = tuple(index)
    check_op([tuple(shape)], lambda x: x[index] * 2)
