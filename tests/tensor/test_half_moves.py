"""Ops that only move values (reshape, view, permute, contiguous, indexing, cat) give a
float16 tensor's gradient in float16 without a round trip through float32: the gradients
equal those of the same program in float32, element for element (moves are exact)."""

from __future__ import annotations

import numpy as np

import anygpu as ag


def _program(x, y):
    a = x.view(3, 4, 5).permute(2, 0, 1).contiguous()          # (5, 3, 4)
    b = a[1:4, :, ::2]                                          # (3, 3, 2)
    c = ag.cat([b.reshape(9, 2), y[:, :2]], dim=0)              # (9 + 7, 2)
    return c


def test_moves_keep_float16_gradients_exact(monkeypatch):
    from anygpu.ops import gpu
    dev = gpu()
    casts = []
    real_cast = type(dev).cast
    monkeypatch.setattr(type(dev), "cast", lambda self, x, dtype: casts.append((x.dtype, dtype)) or
                        real_cast(self, x, dtype))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((12, 5)).astype(np.float16)
    y = rng.standard_normal((7, 3)).astype(np.float16)
    g = rng.standard_normal((16, 2)).astype(np.float16)
    grads = {}
    for dtype in (np.float16, np.float32):
        tx = ag.tensor(x.astype(dtype), requires_grad=True)
        ty = ag.tensor(y.astype(dtype), requires_grad=True)
        out = _program(tx, ty)
        assert out.dtype == (ag.float16 if dtype is np.float16 else ag.float32)
        gt = ag.tensor(g.astype(dtype))
        casts.clear()
        out.backward(gt)
        assert [c for c in casts if c[0] != c[1]] == []     # no f16 <-> f32 round trips
        assert tx.grad.dtype == out.dtype and ty.grad.dtype == out.dtype
        grads[dtype] = (tx.grad.numpy(), ty.grad.numpy())
    for half, full in zip(grads[np.float16], grads[np.float32]):
        np.testing.assert_array_equal(half.astype(np.float32), full)
    assert np.count_nonzero(grads[np.float16][0]) == 18 and np.count_nonzero(grads[np.float16][1]) == 14
