"""Adam/AdamW's multi-tensor path (several parameters per dispatch, ops/optim.py's
adam_multi_step) against the one-kernel-per-parameter path (same bits) and torch.optim."""

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn, optim
from anygpu.ops import foreach

# Odd sizes, an empty one, a 0-d one and one past a workgroup of elements.
SHAPES = [(3,), (17, 5), (), (65, 33), (0,), (2049,), (7, 1, 3), (1,)] * 3


def _run(cls, foreach_flag, init, grads, *, groups=None, skip=(), **kwargs):
    params = [nn.Parameter(ag.tensor(a)) for a in init]
    if groups is None:
        spec = params
    else:
        spec = [{"params": params[:groups]}, {"params": params[groups:], "lr": 3e-3, "weight_decay": 0.0}]
    opt = cls(spec, foreach=foreach_flag, **kwargs)
    for step, step_grads in enumerate(grads):
        for i, (p, g) in enumerate(zip(params, step_grads)):
            p.grad = None if (step, i) in skip else ag.tensor(g)
        opt.step()
    state = [opt.state[p][name].numpy() for p in params if p in opt.state
             for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if name in opt.state[p]]
    return [p.detach().numpy() for p in params], state, opt


def _data(seed, steps=3):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(steps)]
    return init, grads


def _same_bits(a, b):
    for x, y in zip(a, b):
        assert x.shape == y.shape
        np.testing.assert_array_equal(x.view(np.uint32), y.view(np.uint32))


@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
@pytest.mark.parametrize("kwargs", [
    dict(lr=1e-2, weight_decay=0.1),
    dict(lr=1e-2, betas=(0.8, 0.95), weight_decay=0.05, amsgrad=True),
    dict(lr=5e-3, eps=1e-6, maximize=True),
])
def test_multi_tensor_step_has_the_per_parameter_bits(cls, kwargs):
    init, grads = _data(1)
    # Parameter 5 has no gradient on step 1: its step count falls behind the others'.
    skip = {(1, 5), (0, 9)}
    one = _run(cls, False, init, grads, groups=7, skip=skip, **kwargs)
    many = _run(cls, None, init, grads, groups=7, skip=skip, **kwargs)
    _same_bits(one[0], many[0])
    _same_bits(one[1], many[1])
    assert [s["step"] for s in one[2].state.values()] == [s["step"] for s in many[2].state.values()]


@pytest.mark.parametrize("amsgrad", [False, True])
def test_multi_tensor_adamw_matches_torch(amsgrad):
    init, grads = _data(2, steps=5)
    ours, state, _ = _run(optim.AdamW, True, init, grads, groups=10, lr=2e-2, betas=(0.85, 0.97),
                          weight_decay=0.2, amsgrad=amsgrad)
    theirs = [torch.tensor(a, requires_grad=True) for a in init]
    topt = torch.optim.AdamW([{"params": theirs[:10]}, {"params": theirs[10:], "lr": 3e-3, "weight_decay": 0.0}],
                             lr=2e-2, betas=(0.85, 0.97), weight_decay=0.2, amsgrad=amsgrad, foreach=False)
    for step_grads in grads:
        for tp, g in zip(theirs, step_grads):
            tp.grad = torch.tensor(g)
        topt.step()
    for i, (p, tp) in enumerate(zip(ours, theirs)):
        np.testing.assert_allclose(p, tp.detach().numpy(), rtol=1e-6, atol=1e-6, err_msg=f"parameter {i}")


def test_one_dispatch_updates_several_parameters():
    dev = ag.gpu()
    rng = np.random.default_rng(3)
    params = [nn.Parameter(ag.tensor(rng.standard_normal(n).astype(np.float32))) for n in range(1, 31)]
    opt = optim.AdamW(params, lr=0.1)
    for p in params:
        p.grad = ag.tensor(rng.standard_normal(p.shape).astype(np.float32))
    opt.step()
    dev.realize_lazy()
    before = dev.stats["dispatches"]
    opt.step()
    dev.realize_lazy()
    per = foreach.per_dispatch(dev, 4)
    assert per >= 2
    assert dev.stats["dispatches"] - before == -(-len(params) // per)


def test_gradient_sharing_the_parameters_buffer():
    # A gradient that is its parameter's Buffer is read from a copy (one buffer cannot be bound
    # read-only and read_write in one dispatch), as in the per-parameter path.
    values = np.array([0.5, -1.5, 2.0], np.float32)
    results = []
    for flag in (False, None):
        p = nn.Parameter(ag.tensor(values))
        q = nn.Parameter(ag.tensor(values * 2))
        opt = optim.Adam([p, q], lr=0.1)
        p.grad = ag.Tensor(p._buf, p.shape)
        q.grad = ag.tensor(values)
        opt._foreach = flag
        opt.step()
        results.append([p.detach().numpy(), q.detach().numpy()])
    _same_bits(results[0], results[1])


def test_adam_multi_step_checks_its_arguments():
    dev = ag.gpu()
    a, b = dev.upload(np.ones(3, np.float32)), dev.upload(np.ones(4, np.float32))
    common = dict(step_sizes=[0.1], bias_correction2_sqrts=[1.0], beta1=0.9, beta2=0.99, eps=1e-8)
    with pytest.raises(ValueError, match="adam_multi_step.*exp_avg has 4 elements"):
        dev.adam_multi_step([a], [a], [b], [a], **common)
    with pytest.raises(ValueError, match="adam_multi_step: grads has 2 entries"):
        dev.adam_multi_step([a], [a, a], [a], [a], **common)
