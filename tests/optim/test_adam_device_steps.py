"""Adam/AdamW with their step counts on the GPU (issue 28 item 2; torch's capturable Adam):
GradScaler hands them its found_inf flag, ops/optim.py adam_count_steps advances the counts
and computes the bias corrections on the GPU (the host's double-precision values, rounded
once), and the update kernels skip where the flag is set. Checked: the scalars' bits against
the host formula, the same bits as the host-count path, exact skips, state_dict's step, and
torch's GradScaler + Adam/AdamW on the CPU."""

import math

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import nn, optim
from anygpu.ops import gpu
from anygpu.ops import optim as optim_ops

# Odd sizes, an empty one, a 0-d one and one past a workgroup of elements.
SHAPES = [(3,), (17, 5), (), (65, 33), (0,), (2049,), (7, 1, 3)]


def _flag(value: int):
    return gpu().upload(np.array([value], np.uint32))


def _host_scalars(lr, beta1, beta2, t):
    return (np.float32(math.sqrt(1 - beta2 ** int(t))), np.float32(-lr / (1 - beta1 ** int(t))))


@pytest.mark.parametrize("seed", range(4))
def test_count_steps_gives_the_hosts_scalars_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    dev = gpu()
    lr = float(10 ** rng.uniform(-6, 0))
    beta1 = [0.9, 0.0, float(rng.uniform(0, 1)), 0.5][seed]
    beta2 = [0.999, 0.95, 0.9999, float(rng.uniform(0, 1))][seed]
    n = 2000   # past one dispatch's 1664 slots
    counts = np.concatenate([np.arange(300), rng.integers(0, 10**6, n - 300)]).astype(np.uint32)
    words = np.zeros((n, optim_ops.STEP_WORDS), np.uint32)
    words[:, 0] = counts
    words[:, 1:] = 12345   # stale words: overwritten where counted, kept elsewhere
    steps = dev.upload(words.reshape(-1), "u32")
    slots = [s for s in range(n) if s % 7 != 3]   # parameters without a gradient keep their slot
    optim_ops.adam_count_steps(dev, steps, slots, lr=lr, beta1=beta1, beta2=beta2)
    got = dev.read(steps).reshape(n, optim_ops.STEP_WORDS)
    untouched = np.array([s % 7 == 3 for s in range(n)])
    np.testing.assert_array_equal(got[untouched], words[untouched])
    np.testing.assert_array_equal(got[~untouched, 0], counts[~untouched] + 1)
    np.testing.assert_array_equal(got[~untouched, 1], 0)
    want = np.array([_host_scalars(lr, beta1, beta2, c + 1) for c in counts[~untouched]], np.float32)
    np.testing.assert_array_equal(got[~untouched, 2:].view(np.float32), want)


def test_count_steps_keeps_the_count_where_found_inf_is_set():
    dev = gpu()
    steps = dev.upload(np.array([4, 0, 0, 0, 9, 0, 0, 0], np.uint32), "u32")
    optim_ops.adam_count_steps(dev, steps, [0, 1], lr=0.1, beta1=0.9, beta2=0.99, found_inf=_flag(1))
    np.testing.assert_array_equal(dev.read(steps)[[0, 1, 4, 5]], [4, 1, 9, 1])
    optim_ops.adam_count_steps(dev, steps, [1], lr=0.1, beta1=0.9, beta2=0.99, found_inf=_flag(0))
    got = dev.read(steps)
    np.testing.assert_array_equal(got[[0, 1, 4, 5]], [4, 1, 10, 0])
    np.testing.assert_array_equal(got[6:8].view(np.float32), _host_scalars(0.1, 0.9, 0.99, 10))


def test_counted_ops_check_their_arguments():
    dev = gpu()
    steps = dev.upload(np.zeros(8, np.uint32), "u32")
    with pytest.raises(ValueError, match="adam_count_steps: steps must be a u32 buffer"):
        optim_ops.adam_count_steps(dev, dev.upload(np.zeros(8, np.float32)), [0], lr=0.1, beta1=0.9, beta2=0.9)
    with pytest.raises(ValueError, match="adam_count_steps: slot 2 is out of range"):
        optim_ops.adam_count_steps(dev, steps, [2], lr=0.1, beta1=0.9, beta2=0.9)
    with pytest.raises(ValueError, match="adam_count_steps: found_inf must be one u32"):
        optim_ops.adam_count_steps(dev, steps, [0], lr=0.1, beta1=0.9, beta2=0.9,
                                   found_inf=dev.upload(np.zeros(2, np.uint32)))
    with pytest.raises(ValueError, match="adam_count_steps: betas"):
        optim_ops.adam_count_steps(dev, steps, [0], lr=0.1, beta1=1.0, beta2=0.9)
    p = dev.upload(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="adam_step_counted: slot 5"):
        optim_ops.adam_step_counted(dev, p, dev.copy(p), dev.copy(p), dev.copy(p), steps=steps, slot=5,
                                    beta1=0.9, beta2=0.9, eps=1e-8)
    with pytest.raises(ValueError, match="adam_multi_step_counted: slots has 0 entries"):
        optim_ops.adam_multi_step_counted(dev, [p], [dev.copy(p)], [dev.copy(p)], [dev.copy(p)], steps=steps,
                                          slots=[], beta1=0.9, beta2=0.9, eps=1e-8)


def _state_arrays(opt, params):
    return [opt.state[p][name].numpy().copy() for p in params if p in opt.state
            for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq") if name in opt.state[p]]


@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
@pytest.mark.parametrize("foreach", [None, False])
@pytest.mark.parametrize("amsgrad, maximize, weight_decay", [(False, False, 0.0), (True, True, 0.05),
                                                             (False, True, 0.1), (True, False, 0.0)])
def test_device_counts_give_the_host_paths_bits_and_skip_exactly(cls, foreach, amsgrad, maximize, weight_decay):
    """The same updates through found_inf = 0 as through step() (host counts), bit for bit;
    found_inf = 1 writes nothing and keeps the counts; a parameter without a gradient keeps
    its count; a later step() without a scaler continues from the device counts."""
    rng = np.random.default_rng(1)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    host = [nn.Parameter(ag.tensor(a)) for a in init]
    dev_params = [nn.Parameter(ag.tensor(a)) for a in init]
    spec = dict(lr=3e-2, betas=(0.8, 0.95), amsgrad=amsgrad, maximize=maximize, weight_decay=weight_decay,
                foreach=foreach)
    ref = cls([{"params": host[:4]}, {"params": host[4:], "lr": 1e-2}], **spec)
    opt = cls([{"params": dev_params[:4]}, {"params": dev_params[4:], "lr": 1e-2}], **spec)
    for step in range(6):
        grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
        skip = step == 2
        for i, (a, b, g) in enumerate(zip(host, dev_params, grads)):
            missing = step == 3 and i == 1
            a.grad = None if skip or missing else ag.tensor(g)
            b.grad = None if missing else ag.tensor(g if not skip else g * np.inf)
        if not skip:
            ref.step()
        before = [p.numpy().copy() for p in dev_params] + _state_arrays(opt, dev_params)
        if step < 5:
            opt._step_unless_found_inf(_flag(int(skip)))
        else:
            opt.step()   # no scaler: the counts stay on the GPU and advance there
        if skip:
            after = [p.numpy().copy() for p in dev_params] + _state_arrays(opt, dev_params)
            for x, y in zip(before, after):
                np.testing.assert_array_equal(y, x)
        for x, y in zip([p.numpy() for p in host] + _state_arrays(ref, host),
                        [p.numpy() for p in dev_params] + _state_arrays(opt, dev_params)):
            np.testing.assert_array_equal(y, x)
        for i in range(len(SHAPES)):
            assert ref.state_dict()["state"][i]["step"] == opt.state_dict()["state"][i]["step"]
    assert [int(opt.state[p]["step"]) for p in dev_params] == [5, 4, 5, 5, 5, 5, 5]
    assert opt.state[dev_params[1]]["step"] == 4


def _torch_run(cls_name, init, grads, **kw):
    params = [torch.nn.Parameter(torch.tensor(a)) for a in init]
    opt = getattr(torch.optim, cls_name)(params, **kw)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
    scales = []
    for step_grads in grads:
        opt.zero_grad()
        loss = sum((p * torch.tensor(g)).sum() for p, g in zip(params, step_grads))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return [p.detach().numpy() for p in params], scales, opt.state_dict()


def _ours(cls_name, init, grads, **kw):
    params = [nn.Parameter(ag.tensor(a)) for a in init]
    opt = getattr(optim, cls_name)(params, **kw)
    scaler = ag.amp.GradScaler(init_scale=2.0**10, growth_interval=2)
    scales = []
    for step_grads in grads:
        opt.zero_grad()
        loss = sum((p * ag.tensor(g)).sum() for p, g in zip(params, step_grads))
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return params, scales, opt


@pytest.mark.parametrize("cls_name", ["Adam", "AdamW"])
@pytest.mark.parametrize("kw", [dict(foreach=False), dict(fused=True, amsgrad=True, weight_decay=0.1),
                                dict(maximize=True, weight_decay=0.02, betas=(0.5, 0.9))])
def test_grad_scaler_steps_as_torch(cls_name, kw):
    """GradScaler + Adam/AdamW with an inf gradient on steps 0 and 4 (skipped, scale backed
    off), exact gradients otherwise: weights to 1e-6, scales and step counts equal torch's."""
    rng = np.random.default_rng(2)
    shapes = [(5,), (9, 4), (), (300,)]
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(8)]
    grads[0][1][2, 3] = np.inf
    grads[4][3][7] = np.nan
    kw = dict(lr=0.05, **kw)
    torch_kw = {k: v for k, v in kw.items() if k not in ("fused", "foreach")}
    theirs, torch_scales, torch_state = _torch_run(cls_name, init, grads, **torch_kw)
    ours, scales, opt = _ours(cls_name, init, grads, **kw)
    assert scales == torch_scales
    for p, t in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), t, rtol=0, atol=1e-6)
    state = opt.state_dict()["state"]
    for i in range(len(shapes)):
        assert float(state[i]["step"]) == float(torch_state["state"][i]["step"]) == 6.0
        for name in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_allclose(np.asarray(state[i][name].numpy()).reshape(shapes[i]),
                                       torch_state["state"][i][name].numpy(), rtol=1e-5, atol=1e-7)


def test_load_state_dict_puts_the_counts_back_on_the_gpu():
    """A state dict of GPU-held counts loads into a fresh optimizer (host counts until its next
    scaler step moves them into its slots): continuing both gives the same bits."""
    rng = np.random.default_rng(3)
    init = [rng.standard_normal(s).astype(np.float32) for s in [(4, 3), (7,)]]
    grads = [[rng.standard_normal(a.shape).astype(np.float32) for a in init] for _ in range(6)]
    a = [nn.Parameter(ag.tensor(x)) for x in init]
    b = [nn.Parameter(ag.tensor(x)) for x in init]
    oa = optim.AdamW(a, lr=0.02)
    for g in grads[:3]:
        for p, x in zip(a, g):
            p.grad = ag.tensor(x)
        oa._step_unless_found_inf(_flag(0))
    for p, q in zip(a, b):
        q.data.copy_(p.detach())
    ob = optim.AdamW(b, lr=0.02)
    ob.load_state_dict(optim.flatten_state_dict(oa.state_dict()))
    assert [ob.state[p]["step"] for p in b] == [3, 3]
    for t, g in enumerate(grads[3:]):
        for p, q, x in zip(a, b, g):
            p.grad, q.grad = ag.tensor(x), ag.tensor(x)
        oa._step_unless_found_inf(_flag(int(t == 1)))
        ob._step_unless_found_inf(_flag(int(t == 1)))
    for p, q in zip(a, b):
        np.testing.assert_array_equal(q.numpy(), p.numpy())
    assert [int(ob.state[p]["step"]) for p in b] == [5, 5]
