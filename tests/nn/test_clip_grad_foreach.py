"""clip_grad_norm_'s multi-tensor path (ops/foreach.py: sums of squares and the scaling of
several gradients per dispatch) against torch and against its one-tensor-at-a-time path."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn
from anygpu.ops import foreach

SHAPES = [(3, 4), (5,), (), (0,), (65,), (64,), (4096,), (4097,), (33, 129), (2, 2, 3)]


def _pair(seed, shapes=SHAPES, scale=3.0, poison=None):
    rng = np.random.default_rng(seed)
    grads = [rng.standard_normal(s).astype(np.float32) * scale for s in shapes]
    if poison is not None:
        index, value = poison
        grads[index].reshape(-1)[1] = value
    ours = [nn.Parameter(ag.zeros(*s)) for s in shapes]
    theirs = [torch.zeros(s, requires_grad=True) for s in shapes]
    for p, tp, g in zip(ours, theirs, grads):
        p.grad = ag.tensor(g)
        tp.grad = torch.tensor(g)
    return ours, theirs


@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_matches_torch(max_norm):
    ours, theirs = _pair(1)
    kept = [p.grad for p in ours]
    total = nn.utils.clip_grad_norm_(ours, max_norm)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert total.shape == ()
    np.testing.assert_allclose(total.item(), ttotal.item(), rtol=1e-6)
    for p, tp, g in zip(ours, theirs, kept):
        assert p.grad is g  # scaled in place
        np.testing.assert_allclose(p.grad.numpy(), tp.grad.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("poison", [None, (1, np.inf), (6, -np.inf), (8, np.nan)])
def test_multi_tensor_path_has_the_one_tensor_bits(poison):
    results = []
    for flag in (False, None):
        ours, _ = _pair(2, poison=poison)
        total = nn.utils.clip_grad_norm_(ours, 0.7, foreach=flag)
        results.append([total.numpy()] + [p.grad.numpy() for p in ours])
    for a, b in zip(*results):
        np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.parametrize("poison", [(1, np.inf), (8, np.nan)])
def test_nonfinite_gradients_like_torch(poison):
    ours, theirs = _pair(3, poison=poison)
    total = nn.utils.clip_grad_norm_(ours, 1.0)
    ttotal = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    np.testing.assert_equal(total.item(), ttotal.item())   # inf or nan alike
    for p, tp in zip(ours, theirs):
        np.testing.assert_equal(p.grad.numpy(), tp.grad.numpy())   # nan where torch has nan
    ours, theirs = _pair(3, poison=poison)
    with pytest.raises(RuntimeError, match="non-finite"):
        nn.utils.clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError, match="non-finite"):
        torch.nn.utils.clip_grad_norm_(theirs, 1.0, error_if_nonfinite=True)
    ours, _ = _pair(3)
    nn.utils.clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)   # finite: no error


def test_a_buffer_shared_by_two_gradients_is_scaled_once():
    g = np.array([3.0, 4.0, 12.0], np.float32)
    p, q = nn.Parameter(ag.zeros(3)), nn.Parameter(ag.zeros(3))
    p.grad = ag.tensor(g)
    q.grad = ag.Tensor(p.grad._buf, (3,))   # two gradients, one Buffer
    tp, tq = torch.zeros(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    tp.grad, tq.grad = torch.tensor(g), torch.tensor(g)
    total = nn.utils.clip_grad_norm_([p, q], 2.0)
    ttotal = torch.nn.utils.clip_grad_norm_([tp, tq], 2.0)
    np.testing.assert_allclose(total.item(), ttotal.item(), rtol=1e-6)
    np.testing.assert_allclose(q.grad.numpy(), tq.grad.numpy(), rtol=1e-6)


def test_few_dispatches_for_many_gradients():
    dev = ag.gpu()
    ours, _ = _pair(4, shapes=[(n,) for n in range(1, 41)])
    dev.realize_lazy()
    before = dev.stats["dispatches"]
    nn.utils.clip_grad_norm_(ours, 0.1)
    dev.realize_lazy()
    groups = -(-40 // foreach.per_dispatch(dev, 1, 2))
    # sums of squares, their sum, the factor (sqrt, add, divide, clamp: fused), the scaling
    assert dev.stats["dispatches"] - before <= 2 * groups + 5 < 40


def test_sum_squares_has_the_bits_of_sum_all():
    dev = ag.gpu()
    rng = np.random.default_rng(5)
    sizes = [1, 0, 64, 65, 300, 4096, 4097, 9000, 33, 300_001]   # the last needs a second pass
    arrays = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    bufs = [dev.upload(a) if a.size else dev.alloc(0) for a in arrays]
    sums = dev.read(dev.sum_squares(bufs))
    expected = [dev.read(dev.sum_all(dev.upload(a * a)))[0] if a.size else np.float32(0) for a in arrays]
    np.testing.assert_array_equal(sums.view(np.uint32), np.array(expected, np.float32).view(np.uint32))
    np.testing.assert_allclose(sums, [np.sum(a.astype(np.float64) ** 2) for a in arrays], rtol=1e-5)


def test_scale_by_and_its_checks():
    dev = ag.gpu()
    rng = np.random.default_rng(6)
    arrays = [rng.standard_normal(n).astype(np.float32) for n in (5, 0, 257, 1000)]
    bufs = [dev.upload(a) if a.size else dev.alloc(0) for a in arrays]
    factor = dev.upload(np.array([0.37], np.float32))
    dev.scale_by(bufs, factor)
    for b, a in zip(bufs, arrays):
        np.testing.assert_array_equal(dev.read(b), a * np.float32(0.37))
    with pytest.raises(ValueError, match="scale_by: a Buffer is listed twice"):
        dev.scale_by([bufs[0], bufs[0]], factor)
    with pytest.raises(ValueError, match="scale_by: factor has 2 elements"):
        dev.scale_by(bufs, dev.upload(np.ones(2, np.float32)))
    with pytest.raises(ValueError, match="sum_squares: bufs\\[0\\] must be f32"):
        dev.sum_squares([dev.upload(np.ones(2, np.float16))])
