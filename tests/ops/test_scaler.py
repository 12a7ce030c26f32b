"""GradScaler's multi-gradient unscale (ops/scaler.py) against numpy, and GradScaler
through it against torch's (values, the skipped step after an inf or NaN)."""

from __future__ import annotations

import numpy as np
import pytest

import anygpu as ag
from anygpu.ops import gpu


@pytest.mark.parametrize("bad", [None, "nan", "inf", "-inf", "last"])
def test_unscale_check_against_numpy(bad):
    dev = gpu()
    rng = np.random.default_rng(4)
    sizes = [1, 7, 300, 1025, 3, 64, 999, 2]   # more than one dispatch's worth (GROUP = 6)
    arrays = [rng.standard_normal(n).astype(np.float32) * 1e3 for n in sizes]
    if bad == "last":
        arrays[-1][1] = np.inf
    elif bad is not None:
        arrays[2][17] = float(bad)
    bufs = [dev.upload(a) for a in arrays]
    flag = dev.unscale_check(bufs, 1.0 / 512.0)
    for a, b in zip(arrays, bufs):
        np.testing.assert_array_equal(dev.read(b), a * np.float32(1.0 / 512.0))
    assert bool(dev.read(flag)[0]) == (bad is not None)


def test_unscale_check_edges_and_errors():
    dev = gpu()
    assert not dev.read(dev.unscale_check([], 0.5))[0]
    big = dev.upload(np.full(4, 3e38, np.float32))
    assert dev.read(dev.unscale_check([big], 4.0))[0]        # overflow to inf is found
    with pytest.raises(ValueError, match="must be f32"):
        dev.unscale_check([dev.upload(np.ones(3, np.int32))], 0.5)


def test_grad_scaler_matches_torch_and_skips_a_step_with_inf():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((5, 3)).astype(np.float32)
    xs = [rng.standard_normal((4, 5)).astype(np.float32) for _ in range(3)]
    xs[1][0, 0] = np.inf                    # the second step's gradients are inf: skipped
    results = []
    for lib in (torch, ag):
        w = lib.tensor(w0.copy(), requires_grad=True)
        extra = lib.tensor(np.ones(7, np.float32), requires_grad=True)   # a view-free second parameter
        opt = lib.optim.SGD([w, extra], lr=0.1)
        scaler = (torch.amp.GradScaler("cpu", init_scale=256.0) if lib is torch
                  else ag.amp.GradScaler("cuda", init_scale=256.0))
        for x in xs:
            opt.zero_grad()
            loss = (lib.tensor(x) @ w).square().sum() + extra.sum()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        results.append((w.detach().numpy(), extra.detach().numpy(), scaler.get_scale()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5)
    np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-6)
    assert results[1][2] == results[0][2] == 128.0
