"""Mixed-precision entry points: scripts written for torch.amp run unchanged, in float32,
with the same losses as torch without autocast, and say once that they run in float32."""

import warnings

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import amp


@pytest.fixture(autouse=True)
def fresh_warnings():
    amp._warned.clear()
    yield
    amp._warned.clear()


def train(lib, scaler_cls, autocast, weights, x, y, steps=4):
    """An AMP training loop as the torch docs write it; returns the losses."""
    model = lib.nn.Linear(weights[0].shape[1], weights[0].shape[0])
    model.load_state_dict({"weight": lib.tensor(weights[0]), "bias": lib.tensor(weights[1])})
    opt = lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = scaler_cls()
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        with autocast():
            loss = ((model(lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    return losses, scaler


def test_amp_loop_tracks_torch_fp32_and_scales_as_torch(rng):
    weights = (rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal(3).astype(np.float32))
    x = rng.standard_normal((7, 5)).astype(np.float32)
    y = rng.standard_normal((7, 3)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # float16 autocast and the scaler are real: nothing to warn about
        # 256: with torch's 2**16 the first steps' f16 gradients overflow and are skipped (as on CUDA)
        ours, scaler = train(ag, lambda: ag.amp.GradScaler("cuda", init_scale=256.0),
                             lambda: ag.autocast(device_type="cuda", dtype=ag.float16), weights, x, y)
    theirs, _ = train(torch, lambda: torch.amp.GradScaler("cpu", enabled=False),
                      lambda: torch.autocast("cpu", enabled=False), weights, x, y)
    np.testing.assert_allclose(ours, theirs, rtol=1e-2)  # f16 matmul inputs: f16 rounding
    reference = torch.amp.GradScaler("cpu", init_scale=256.0)
    assert scaler.get_scale() == 256.0 and scaler.is_enabled() is True
    assert scaler.state_dict() == {**reference.state_dict(), "_growth_tracker": 4}
    scaler.load_state_dict(scaler.state_dict())


def test_cuda_amp_spellings_and_decorator(rng):
    data = rng.standard_normal((4, 6)).astype(np.float32)
    a = ag.tensor(data)

    @ag.cuda.amp.autocast()
    def product():
        return a @ a.T

    assert product().dtype is ag.float16 and (a @ a.T).dtype is ag.float32
    plain = (a @ a.T).numpy()
    with pytest.warns(UserWarning, match="float32"):
        with ag.amp.autocast("cuda", dtype=ag.bfloat16):  # no bfloat16 storage: float32, said once
            np.testing.assert_array_equal((a @ a.T).numpy(), plain)
    with ag.autocast("cpu", enabled=False):
        assert (a @ a.T).dtype is ag.float32
    scaler = ag.cuda.amp.GradScaler(init_scale=1024.0, growth_interval=10)
    assert scaler.get_scale() == 1024.0 and scaler.get_growth_interval() == 10
    loss = ag.tensor([2.0])
    assert scaler.scale(loss).item() == 2048.0
    assert ag.amp.GradScaler(enabled=False).scale(loss) is loss
    with pytest.raises(ValueError, match="device_type"):
        ag.autocast("tpu")


def _cast_dispatches(dev, fn) -> int:
    """Cast kernels (f32 <-> f16) that fn launches, op by op (every cast is its own dispatch)."""
    launched = []
    launch = dev.launch

    def counting(kernel, *args, **kwargs):
        if kernel.name.startswith("cast_f"):
            launched.append(kernel.name)
        return launch(kernel, *args, **kwargs)

    saved, dev.fuse = dev.fuse, False
    dev.launch = counting
    try:
        fn()
        dev.synchronize()
    finally:
        del dev.launch
        dev.fuse = saved
    return len(launched)


def test_autocast_converts_a_master_weight_once_per_region_as_torch(rng):
    """torch's autocast cache: a float32 leaf that requires grad is converted to float16
    once per region (the f16 copy and its recorded conversion shared by every use), again
    after an in-place change (its version), in a new region, under another grad mode, and
    per use with cache_enabled=False; non-leaves and float32 targets are never cached."""
    dev = ag.gpu()
    if not dev.supports("f16"):
        pytest.skip("no shader-f16 on this adapter")
    w_data = rng.standard_normal((6, 5)).astype(np.float32)
    x_data = rng.standard_normal((4, 5)).astype(np.float32)
    lin = ag.nn.Linear(5, 6, bias=False)
    lin.load_state_dict({"weight": ag.tensor(w_data)})
    x = ag.tensor(x_data)

    def three_uses(cache_enabled=True):
        with ag.autocast("cuda", dtype=ag.float16, cache_enabled=cache_enabled):
            return lin(x) + lin(x * 2.0) + (lin.weight @ x.half().T).T   # F.linear twice, matmul once

    assert _cast_dispatches(dev, three_uses) == 1 + 2 + 1  # the weight once; x, x * 2, x.half()
    assert _cast_dispatches(dev, lambda: three_uses(False)) == 3 + 2 + 1
    from anygpu.tensor.elementwise import _autocast_cast
    with ag.autocast("cuda", dtype=ag.float16):
        first = _autocast_cast(lin.weight, ag.float16)
        assert _autocast_cast(lin.weight, ag.float16) is first and first.grad_fn is not None
        with ag.no_grad():
            frozen = _autocast_cast(lin.weight, ag.float16)
            assert frozen is not first and frozen.grad_fn is None
            assert _autocast_cast(lin.weight, ag.float16) is frozen
        with ag.autocast("cuda", dtype=ag.float16):  # a nested region shares the outer cache
            assert _autocast_cast(lin.weight, ag.float16) is first
        with ag.no_grad():
            lin.weight.mul_(1.0)   # a new version: converted again
        second = _autocast_cast(lin.weight, ag.float16)
        assert second is not first and _autocast_cast(lin.weight, ag.float16) is second
        second.add_(0.0)            # the copy changed by its user is not handed out again
        assert _autocast_cast(lin.weight, ag.float16) is not second
        hidden = lin.weight * 1.0  # not a leaf
        assert _autocast_cast(hidden, ag.float16) is not _autocast_cast(hidden, ag.float16)
        half = lin.weight.half().detach().requires_grad_()
        assert _autocast_cast(half, ag.float32) is not _autocast_cast(half, ag.float32)
    with ag.autocast("cuda", dtype=ag.float16):
        assert _autocast_cast(lin.weight, ag.float16) is not second  # a new region, a new copy
    from anygpu import amp as amp_module
    assert amp_module._state.cache is None  # dropped with the outermost region


def test_a_cached_weight_gets_the_gradient_of_all_its_uses(rng):
    """Two uses of a weight under autocast: its float32 gradient is the float16 sum of both
    uses' gradients converted once (torch's cached copy), close to torch in float32."""
    dev = ag.gpu()
    if not dev.supports("f16"):
        pytest.skip("no shader-f16 on this adapter")
    w_data = rng.standard_normal((7, 9)).astype(np.float32)
    x_data = rng.standard_normal((5, 9)).astype(np.float32)
    results = []
    for lib in (ag, torch):
        w = lib.tensor(w_data, requires_grad=True)
        x = lib.tensor(x_data)
        if lib is ag:
            with ag.autocast("cuda", dtype=ag.float16):
                out = lib.nn.functional.linear(x, w) * lib.nn.functional.linear(x * 0.5, w)
                assert out.dtype is ag.float16
            out.float().sum().backward()
        else:
            (lib.nn.functional.linear(x, w) * lib.nn.functional.linear(x * 0.5, w)).sum().backward()
        results.append(w.grad.numpy())
    assert results[0].dtype == np.float32
    np.testing.assert_allclose(results[0], results[1], rtol=2e-2, atol=2e-2)
