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
    sizes = [1, 7, 300, 1025, 3, 64, 999, 2, 0, 5, 70000, 4, 8, 9, 11]   # more than one dispatch's worth (12)
    arrays = [rng.standard_normal(n).astype(np.float32) * 1e3 for n in sizes]
    if bad == "last":   # in the second dispatch
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


def test_unscale_by_a_scale_on_the_gpu_uses_torchs_reciprocal():
    """scale= (a Buffer): the kernel's 1/scale is float(1/double(scale)), as torch's inv_scale."""
    dev = gpu()
    rng = np.random.default_rng(7)
    scales = np.concatenate([rng.uniform(1, 2, 40), rng.uniform(1e-3, 1e7, 40), [1.0, 3.0, 2.0**-20, 2.0**100]])
    for s in scales.astype(np.float32):
        g = dev.upload(np.array([1.0, -3.5, 7e-3], np.float32))
        flag = dev.unscale_check([g], scale=dev.upload(np.array([s], np.float32)))
        inverse = np.float32(1.0 / np.float64(s))
        np.testing.assert_array_equal(dev.read(g), np.array([1.0, -3.5, 7e-3], np.float32) * inverse)
        assert not dev.read(flag)[0]
    with pytest.raises(ValueError, match="exactly one of inverse"):
        dev.unscale_check([], 0.5, scale=dev.upload(np.ones(1, np.float32)))


def test_update_scale_against_torch():
    torch = pytest.importorskip("torch")
    dev = gpu()
    rng = np.random.default_rng(8)
    cases = [(np.float32(rng.uniform(0.5, 4)), float(rng.uniform(1.01, 3)), float(rng.uniform(0.1, 0.9)),
              i % 3 == 0, 1 + i % 3, i % 2) for i in range(60)]
    cases += [(np.float32(3e38), 2.0, 0.5, False, 1, 0), (np.float32(2.0**16), 2.0, 0.5, True, 5, 4)]  # inf: kept
    for s, growth, backoff, found, interval, tracker in cases:
        scale, count = torch.full((), float(s)), torch.full((), tracker, dtype=torch.int32)
        torch._amp_update_scale_(scale, count, torch.full((), float(found)), growth, backoff, interval)
        buf, tbuf = dev.upload(np.array([s], np.float32)), dev.upload(np.array([tracker], np.int32))
        dev.update_scale(buf, tbuf, [dev.upload(np.array([found], np.uint32))], growth_factor=growth,
                         backoff_factor=backoff, growth_interval=interval)
        assert (dev.read(buf)[0], dev.read(tbuf)[0]) == (np.float32(scale.item()), count.item())


@pytest.mark.parametrize("found_at", [None, 0, 8])
def test_update_scale_reads_any_number_of_flags(found_at):
    dev = gpu()
    flags = [dev.upload(np.array([k == found_at], np.uint32)) for k in range(9)]   # more than FLAGS
    scale, tracker = dev.upload(np.array([8.0], np.float32)), dev.upload(np.array([3], np.int32))
    dev.update_scale(scale, tracker, flags, growth_factor=2.0, backoff_factor=0.5, growth_interval=10)
    assert (dev.read(scale)[0], dev.read(tracker)[0]) == ((4.0, 0) if found_at is not None else (8.0, 4))
    with pytest.raises(ValueError, match="no found_inf flags"):
        dev.update_scale(scale, tracker, [], growth_factor=2.0, backoff_factor=0.5, growth_interval=10)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_grad_scaler_odd_factors_and_a_first_skipped_step_as_torch(optimizer):
    """Scales that are not powers of two (torch rounds scale * factor once from double), the
    first step skipped (SGD's momentum buffer is then made by the next one, with dampening),
    update(new_scale), state_dict; Adam takes no flag (the scaler reads it back)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(7)]
    xs[0][1, 2] = np.inf
    xs[4][0, 0] = np.nan
    results = []
    for lib in (torch, ag):
        w = lib.tensor(w0.copy(), requires_grad=True)
        opt = (lib.optim.SGD([w], lr=0.05, momentum=0.8, dampening=0.3) if optimizer == "SGD"
               else lib.optim.Adam([w], lr=0.05))
        scaler = lib.amp.GradScaler("cpu" if lib is torch else "cuda", init_scale=3.7, growth_factor=1.7,
                                    backoff_factor=0.3, growth_interval=2)
        scales = []
        for i, x in enumerate(xs):
            opt.zero_grad()
            scaler.scale((lib.tensor(x) @ w).square().sum()).backward()
            assert scaler.step(opt) is None
            scaler.update(5.3 if i == 5 else None)
            scales.append(scaler.get_scale())
        results.append((w.detach().numpy(), scales, scaler.state_dict()))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-5)
    assert results[1][1] == results[0][1] and results[1][2] == results[0][2]


def test_grad_scaler_over_many_parameters_matches_torch():
    """14 parameters (more than one unscale dispatch binds): inf and NaN gradients in either
    dispatch skip the step and back the scale off, clean steps grow it, and the unscaled
    gradients and the weights are torch's (gradients exactly: each is the scale times a
    power of two, so both libraries' backward gives the same bits)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    sizes = [3, 1, 40, 7, 300, 2, 5, 64, 9, 11, 1000, 4, 6, 13]
    starts = [rng.standard_normal(n).astype(np.float32) for n in sizes]
    coefficients = [[2.0 ** int(rng.integers(-6, 6)) for _ in sizes] for _ in range(8)]
    coefficients[2][1] = np.inf           # first dispatch: skipped, backed off
    coefficients[5][13] = np.nan          # the second dispatch's last parameter: skipped too
    results = []
    for lib in (torch, ag):
        params = [lib.tensor(s.copy(), requires_grad=True) for s in starts]
        opt = lib.optim.SGD(params, lr=0.01, momentum=0.5)
        scaler = lib.amp.GradScaler("cpu" if lib is torch else "cuda", init_scale=2.0 ** 12, growth_interval=2)
        history = []
        for step in coefficients:
            opt.zero_grad()
            loss = sum((p * c).sum() for p, c in zip(params, step))
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            grads = [p.grad.detach().numpy().copy() for p in params]
            scaler.step(opt)
            scaler.update()
            history.append((grads, scaler.get_scale(), scaler._get_growth_tracker()))
        results.append((history, [p.detach().numpy() for p in params]))
    for (theirs, their_scale, their_tracker), (ours, our_scale, our_tracker) in zip(results[0][0], results[1][0]):
        assert (our_scale, our_tracker) == (their_scale, their_tracker)
        for g, want in zip(ours, theirs):
            np.testing.assert_array_equal(g, want)
    for ours, theirs in zip(results[1][1], results[0][1]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)
    assert [h[1] for h in results[1][0]] == [4096.0, 8192.0, 4096.0, 4096.0, 8192.0, 4096.0, 4096.0, 8192.0]


def test_unscale_of_a_small_model_is_one_dispatch():
    dev = gpu()
    bufs = [dev.upload(np.full(n, 2.0, np.float32)) for n in (144, 16, 4608, 32, 32768, 64, 640, 10)]
    scale = dev.upload(np.array([4.0], np.float32))
    before = dev.stats["dispatches"]
    flag = dev.unscale_check(bufs, scale=scale)
    assert dev.stats["dispatches"] - before == 1
    assert all((dev.read(b) == 0.5).all() for b in bufs) and not dev.read(flag)[0]
    with pytest.raises(ValueError, match="listed twice"):
        dev.unscale_check([bufs[0], bufs[0]], 0.5)


def test_a_gradient_buffer_two_parameters_share_is_unscaled_once():
    """add's backward hands both operands one Buffer: unscaled once, as torch's two gradients."""
    torch = pytest.importorskip("torch")
    results = []
    for lib in (torch, ag):
        a = lib.tensor(np.full(3, 2.0, np.float32), requires_grad=True)
        b = lib.tensor(np.ones(3, np.float32), requires_grad=True)
        opt = lib.optim.SGD([a, b], lr=0.25)
        scaler = lib.amp.GradScaler("cpu" if lib is torch else "cuda", init_scale=8.0)
        scaler.scale(((a + b) * 3.0).sum()).backward()
        scaler.unscale_(opt)
        results.append((a.grad.numpy().copy(), b.grad.numpy().copy()))
        scaler.step(opt)
        scaler.update()
        results.append((a.detach().numpy(), b.detach().numpy()))
    for ours, theirs in zip(results[2:], results[:2]):
        np.testing.assert_array_equal(ours[0], theirs[0])
        np.testing.assert_array_equal(ours[1], theirs[1])
    np.testing.assert_array_equal(results[2][0], np.full(3, 3.0, np.float32))
