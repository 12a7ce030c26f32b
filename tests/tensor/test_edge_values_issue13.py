"""Edge values and shapes against torch (issue 13, item 10): NaN propagation, select-not-multiply
masks in backward, 0-d dims, zero-size tensors, 0**-1, scaled std, refusals torch makes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import anygpu as ag
import anygpu.nn.functional as F

nan, inf = math.nan, math.inf
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom")
X = [1.0, nan, -2.0, 3.0]


def as_np(value):
    if isinstance(value, tuple):
        value = value[0]
    if isinstance(value, torch.Tensor):
        return value.detach().float().numpy()
    return value.numpy().astype(np.float32)


def same(ours, theirs, rtol=1e-5):
    a, t = as_np(ours), as_np(theirs)
    assert a.shape == t.shape, (a.shape, t.shape)
    np.testing.assert_allclose(a, t, rtol=rtol, atol=1e-6, equal_nan=True)


def both(fn, *arrays):
    return fn(ag, F, *[ag.tensor(np.asarray(a, np.float32)) for a in arrays]), \
        fn(torch, TF, *[torch.tensor(np.asarray(a, np.float32)) for a in arrays])


FORWARD = {
    "clamp": (lambda m, f, x: x.clamp(0, 1), [X]),
    "maximum": (lambda m, f, x, y: m.maximum(x, y), [X, [0.0] * 4]),
    "minimum": (lambda m, f, x, y: m.minimum(y, x), [X, [0.0] * 4]),
    "max": (lambda m, f, x: x.max(), [X]),
    "min": (lambda m, f, x: x.min(), [X]),
    "max-dim": (lambda m, f, x: x.reshape(2, 2).max(1)[0], [X]),
    "max-dim-index": (lambda m, f, x: x.reshape(2, 2).max(1)[1], [X]),
    "argmax": (lambda m, f, x: x.argmax(), [X]),
    "argmin": (lambda m, f, x: x.argmin(), [X]),
    "max_pool2d-nan": (lambda m, f, x: f.max_pool2d(x.reshape(1, 1, 2, 2), 2), [X]),
    "max_pool2d-window-in-padding": (lambda m, f, x: f.max_pool2d(x.reshape(1, 1, 1, 4), 2, 2, 1, dilation=2),
                                     [[1.0, 2.0, 3.0, 4.0]]),
    "elu": (lambda m, f, x: f.elu(x), [X]),
    "nan**3": (lambda m, f, x: x ** 3, [X]),
    "x!=x": (lambda m, f, x: (x != x).float(), [X]),
    "x==x": (lambda m, f, x: (x == x).float(), [X]),
    "x<x+1": (lambda m, f, x: (x < x + 1).float(), [X]),
    "0**-1": (lambda m, f, x: x ** -1, [[0.0, -0.0, 2.0]]),
    "0**-2": (lambda m, f, x: x ** -2.0, [[0.0, -0.0]]),
    "0**-1 tensor": (lambda m, f, x, y: x ** y, [[0.0, -0.0], [-1.0, -1.0]]),
    "logsumexp-inf": (lambda m, f, x: x.logsumexp(0), [[inf, 1.0]]),
    "logsumexp--inf": (lambda m, f, x: x.logsumexp(0), [[-inf, -inf]]),
    "logsumexp-empty": (lambda m, f, x: x.reshape(2, 0).logsumexp(1), [np.zeros(0)]),
    "std-1e30": (lambda m, f, x: x.std(), [[1e30, 2e30, 3e30]]),
    "std-dim-1e30": (lambda m, f, x: x.reshape(2, 2).std(1), [[1e30, -1e30, 3e30, 2e30]]),
}


@pytest.mark.parametrize("name", sorted(FORWARD))
def test_edge_values_forward_like_torch(name):
    fn, arrays = FORWARD[name]
    ours, theirs = both(fn, *arrays)
    same(ours, theirs)


@pytest.mark.parametrize("reduce", ["sum", "mean", "var", "std", "logsumexp", "max", "min", "argmax", "argmin"])
@pytest.mark.parametrize("dim", [0, -1, (0,)])
def test_zero_d_tensor_reduced_over_its_dim(reduce, dim):
    if reduce in ("logsumexp", "max", "min", "argmax", "argmin") and isinstance(dim, tuple):
        dim = dim[0]
    ours = getattr(ag.tensor(1.5), reduce)(dim)
    theirs = getattr(torch.tensor(1.5), reduce)(dim)
    same(ours, theirs)
    with pytest.raises(IndexError):
        getattr(ag.tensor(1.5), reduce)(1)


def test_normalize_of_a_scalar():
    same(F.normalize(ag.tensor(1.5), dim=0), TF.normalize(torch.tensor(1.5), dim=0))


def grad_of(module, fn, x, upstream):
    t = (ag.tensor if module is ag else torch.tensor)(np.asarray(x, np.float32), requires_grad=True)
    out = fn(module, F if module is ag else TF, t)
    out.backward((ag.tensor if module is ag else torch.tensor)(np.asarray(upstream, np.float32)))
    return t.grad


BACKWARD = {
    "clamp": (lambda m, f, x: x.clamp(0, 1), [-2.0, 0.5, 3.0], [inf, inf, inf]),
    "maximum": (lambda m, f, x: m.maximum(x, x * 0 + 1), [-2.0, 0.5, 3.0], [inf, -inf, inf]),
    "minimum": (lambda m, f, x: m.minimum(x, x * 0 + 1), [-2.0, 0.5, 3.0], [inf, -inf, inf]),
    "max": (lambda m, f, x: x.max(), [-2.0, 0.5, 3.0], inf),
    "max-dim": (lambda m, f, x: x.reshape(1, 3).max(1)[0], [-2.0, 0.5, 3.0], [inf]),
    "min-dim": (lambda m, f, x: x.reshape(3, 1).min(0)[0], [-2.0, 0.5, 3.0], [-inf]),
    "nll-none": (lambda m, f, x: f.nll_loss(x.reshape(2, 3), (ag.tensor if m is ag else torch.tensor)([1, 2]),
                                           reduction="none"), [-1.0, -2.0, -3.0, -0.5, -1.5, -0.1], [inf, inf]),
    "sqrt-at-0": (lambda m, f, x: x ** 0.5, [0.0, 4.0], [1.0, 1.0]),
    "relu": (lambda m, f, x: f.relu(x), [-1.0, 2.0], [inf, inf]),
}


@pytest.mark.parametrize("name", sorted(BACKWARD))
def test_backward_masks_select_instead_of_multiplying(name):
    fn, x, upstream = BACKWARD[name]
    same(grad_of(ag, fn, x, upstream), grad_of(torch, fn, x, upstream))


ZERO_SIZE = {
    "matmul-0-rows": (lambda m, f, a, b: a @ b, [(0, 3), (3, 4)]),
    "matmul-k-0": (lambda m, f, a, b: a @ b, [(2, 0), (0, 4)]),
    "linear-0-rows": (lambda m, f, a, w: f.linear(a, w), [(0, 3), (4, 3)]),
    "linear-k-0": (lambda m, f, a, w, b: f.linear(a, w, b), [(2, 0), (4, 0), (4,)]),
    "cross_entropy-0-rows": (lambda m, f, a: f.cross_entropy(a, a.sum(1).long() if m is torch else a.sum(1).long(),
                                                             reduction="sum"), [(0, 3)]),
    "conv2d-batch-0": (lambda m, f, a, w, b: f.conv2d(a, w, b, padding=1), [(0, 2, 5, 5), (3, 2, 3, 3), (3,)]),
    "conv_transpose2d-batch-0": (lambda m, f, a, w: f.conv_transpose2d(a, w, stride=2), [(0, 2, 3, 3), (2, 3, 3, 3)]),
    "max_pool2d-batch-0": (lambda m, f, a: f.max_pool2d(a, 2), [(0, 2, 4, 4)]),
    "avg_pool2d-batch-0": (lambda m, f, a: f.avg_pool2d(a, 2), [(0, 2, 4, 4)]),
    "interpolate-batch-0": (lambda m, f, a: f.interpolate(a, scale_factor=2), [(0, 2, 3, 3)]),
    "sdpa-L-0": (lambda m, f, q, k, v: f.scaled_dot_product_attention(q, k, v), [(2, 0, 4), (2, 3, 4), (2, 3, 5)]),
    "sdpa-S-0": (lambda m, f, q, k, v: f.scaled_dot_product_attention(q, k, v), [(2, 3, 4), (2, 0, 4), (2, 0, 5)]),
    "log_softmax-empty-dim": (lambda m, f, a: f.log_softmax(a, 1), [(2, 0)]),
    "pad-crop": (lambda m, f, a: f.pad(a, (-1, 2, 1, -1)), [(2, 3, 5)]),
}


@pytest.mark.parametrize("name", sorted(ZERO_SIZE))
def test_zero_size_shapes_values_and_gradient_link(name):
    fn, shapes = ZERO_SIZE[name]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape).astype(np.float32) for shape in shapes]
    ours_in = [ag.tensor(a, requires_grad=True) for a in arrays]
    theirs_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    ours, theirs = fn(ag, F, *ours_in), fn(torch, TF, *theirs_in)
    same(ours, theirs)
    (ours * 1.0).sum().backward()
    (theirs * 1.0).sum().backward()
    for a, t in zip(ours_in, theirs_in):
        assert a.grad is not None, "the gradient link was lost"
        same(a.grad, t.grad)


@pytest.mark.parametrize("call", [
    lambda m: m.tensor([1.0, 2.0, 3.0]).index_select(0, m.tensor([-1])),
    lambda m: m.tensor([1.0, 2.0, 3.0]).gather(0, m.tensor([-1])),
    lambda m: m.ones(2, 3).flatten(1, 0),
    lambda m: m.tensor(2.0).flatten(1),
])
def test_refused_where_torch_refuses(call):
    with pytest.raises(Exception):
        call(torch)
    with pytest.raises((ValueError, IndexError)):
        call(ag)


def test_index_computed_on_the_gpu_is_checked_too():
    index = ag.tensor([1, 2]) - 3  # [-2, -1], no host copy
    with pytest.raises(IndexError, match="out of bounds"):
        ag.tensor([1.0, 2.0, 3.0]).index_select(0, index)


@pytest.mark.parametrize("scale", [1e30, 1e-20, 1.0])
def test_norms_stay_finite_where_a_scaled_computation_does(scale):
    """float32 torch overflows here (NaN); the float64 reference is the oracle."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 4, 3)) * scale).astype(np.float32)
    ours = F.layer_norm(ag.tensor(x), (3,)).numpy()
    theirs = TF.layer_norm(torch.tensor(x, dtype=torch.float64), (3,)).numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-5 if scale >= 1 else 1e-3)
    ours = F.group_norm(ag.tensor(x), 2).numpy()
    theirs = TF.group_norm(torch.tensor(x, dtype=torch.float64), 2).numpy()
    np.testing.assert_allclose(ours, theirs, atol=2e-5 if scale >= 1 else 1e-3)
    ours = ag.tensor(x).std(-1).numpy()
    theirs = torch.tensor(x, dtype=torch.float64).std(-1).numpy()
    np.testing.assert_allclose(ours, theirs, rtol=1e-5)


@pytest.mark.parametrize(("shape", "dims", "new"), [
    ((2, 3), (1, 0), (6,)), ((2, 3), (1, 0), (3, 2)), ((2, 3, 4), (0, 2, 1), (2, 12)),
    ((2, 3, 4), (1, 0, 2), (3, 2, 2, 2)), ((1, 3), (1, 0), (3,)), ((2, 1, 3), (1, 0, 2), (6,)),
])
def test_view_refuses_what_torch_refuses(shape, dims, new):
    theirs = torch.zeros(shape).permute(dims)
    ours = ag.zeros(*shape).permute(dims)
    assert ours.is_contiguous() == theirs.is_contiguous()
    try:
        theirs.view(new)
    except RuntimeError:
        with pytest.raises(ValueError, match="view"):
            ours.view(new)
        assert ours.contiguous().view(new).shape == new
    else:
        assert ours.view(new).shape == new
    assert ours.reshape(new).shape == new
