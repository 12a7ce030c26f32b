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
