"""ag.optim against torch.optim: same parameters, same gradients, same updates step for step."""

import warnings

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import io, nn, optim

from .pairs import assert_params_close, pair_params, set_grads
from anygpu.ops import foreach
from anygpu.tensor import Tensor

SHAPES = [(3, 4), (5,), (2, 3, 2)]
RTOL, ATOL = 1e-5, 1e-6


CASES = [
    ("sgd", dict(lr=0.1)),
    ("sgd", dict(lr=0.1, momentum=0.9)),
    ("sgd", dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01)),
    ("sgd", dict(lr=0.1, momentum=0.8, nesterov=True, weight_decay=0.05)),
    ("sgd", dict(lr=0.1, momentum=0.5, maximize=True)),
    ("adam", dict(lr=1e-2)),
    ("adam", dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adam", dict(lr=1e-2, amsgrad=True, weight_decay=0.01)),
    ("adamw", dict(lr=1e-2)),
    ("adamw", dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    ("adamw", dict(lr=3e-2, betas=(0.6, 0.9), weight_decay=0.5, maximize=True)),
]
CLASSES = {"sgd": (optim.SGD, torch.optim.SGD), "adam": (optim.Adam, torch.optim.Adam),
           "adamw": (optim.AdamW, torch.optim.AdamW)}


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{'-'.join(k)}" for n, k in CASES])
def test_matches_torch_step_for_step(name, kwargs):
    rng = np.random.default_rng(0)
    ours, theirs = pair_params(rng, SHAPES)
    ours_cls, torch_cls = CLASSES[name]
    opt, topt = ours_cls(ours, **kwargs), torch_cls(theirs, **kwargs)
    for step in range(5):
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
        assert_params_close(ours, theirs, step, RTOL, ATOL)


def test_gradients_from_a_model_loss():
    """Gradients computed by anygpu's autograd from a small model's loss, Adam vs torch."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 4)).astype(np.float32)
    y = rng.standard_normal((6, 3)).astype(np.float32)
    ours, theirs = pair_params(rng, [(4, 3), (3,)])
    opt = optim.AdamW(ours, lr=0.05, weight_decay=0.1)
    topt = torch.optim.AdamW(theirs, lr=0.05, weight_decay=0.1)
    for step in range(4):
        opt.zero_grad()
        loss = ((ag.tensor(x) @ ours[0] + ours[1] - ag.tensor(y)) ** 2).mean()
        loss.backward()
        topt.zero_grad()
        tloss = ((torch.tensor(x) @ theirs[0] + theirs[1] - torch.tensor(y)) ** 2).mean()
        tloss.backward()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
        opt.step()
        topt.step()
        assert_params_close(ours, theirs, step, RTOL, ATOL)


def test_param_groups_and_params_without_grad():
    rng = np.random.default_rng(2)
    ours, theirs = pair_params(rng, SHAPES)
    opt = optim.SGD([{"params": ours[:2], "lr": 0.5}, {"params": ours[2:]}], lr=0.1, momentum=0.9)
    topt = torch.optim.SGD([{"params": theirs[:2], "lr": 0.5}, {"params": theirs[2:]}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.1]
    for step in range(3):
        set_grads(rng, ours, theirs)
        ours[1].grad = None  # torch skips parameters without a gradient
        theirs[1].grad = None
        opt.step()
        topt.step()
        assert_params_close(ours, theirs, step, RTOL, ATOL)
    assert ours[1] not in opt.state


def test_update_is_in_place_fused_and_needs_no_read_back():
    dev = ag.gpu()
    rng = np.random.default_rng(3)
    model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 2))
    params = list(model.parameters())
    opt = optim.Adam(params, lr=0.1)
    for p in params:
        p.grad = ag.tensor(rng.standard_normal(p.shape).astype(np.float32))
    opt.step()
    buffers = [p._buf for p in params]
    before = [p.numpy() for p in params]
    dev.synchronize()
    submits, dispatches = dev.stats["submits"], dev.stats["dispatches"]
    opt.step()
    # several parameters per kernel (ops/optim.py adam_multi_step)
    assert dev.stats["dispatches"] - dispatches == -(-len(params) // foreach.per_dispatch(dev, 4))
    assert dev.stats["submits"] == submits  # nothing was read back or waited for
    assert [p._buf for p in params] == buffers  # same GPU buffers, updated in place
    weight = model[0].weight  # the module sees the new values
    assert weight is params[0]
    assert not np.allclose(weight.numpy(), before[0])
    assert not np.allclose(Tensor(weight._buf, weight.shape).numpy(), before[0])


def test_cached_host_copy_is_cleared():
    p = nn.Parameter(ag.tensor([1.0, 2.0]))  # built from host data: a host copy is cached
    opt = optim.SGD([p], lr=1.0)
    p.grad = ag.tensor([0.5, 0.5])
    opt.step()
    np.testing.assert_allclose(p.numpy(), [0.5, 1.5])


def test_zero_grad():
    p = nn.Parameter(ag.tensor([1.0, 2.0]))
    opt = optim.SGD([p], lr=0.1)
    p.grad = ag.tensor([1.0, 1.0])
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 0.0])
    opt.zero_grad()
    assert p.grad is None


def test_rejects_bad_arguments():
    p = nn.Parameter(ag.tensor([1.0]))
    with pytest.raises(ValueError, match="learning rate"):
        optim.SGD([p], lr=-1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="beta"):
        optim.Adam([p], betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="empty"):
        optim.Adam([])
    with pytest.raises(ValueError, match="more than one"):
        optim.Adam([{"params": [p]}, {"params": [p]}])
    opt = optim.Adam([p])
    p.grad = ag.tensor([1.0, 2.0])
    with pytest.raises(ValueError, match=r"gradient has shape \(2,\)"):
        opt.step()


@pytest.mark.parametrize("name,kwargs", [("sgd", dict(lr=0.1, momentum=0.9, nesterov=True)),
                                         ("adam", dict(lr=1e-2, amsgrad=True)),
                                         ("adamw", dict(lr=1e-2, weight_decay=0.1))])
def test_state_dict_round_trip_through_a_checkpoint_resumes_identically(tmp_path, name, kwargs):
    rng = np.random.default_rng(4)
    ours_cls, _ = CLASSES[name]
    first, _ = pair_params(rng, SHAPES)
    opt = ours_cls(first, **kwargs)
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(6)]
    for step in range(3):
        for p, g in zip(first, grads[step]):
            p.grad = ag.tensor(g)
        opt.step()
    path = tmp_path / "opt.safetensors"
    io.save(optim.flatten_state_dict(opt.state_dict()), path)
    # A fresh optimizer over copies of the parameters, restored from the file.
    second = [nn.Parameter(ag.tensor(p.numpy())) for p in first]
    resumed = ours_cls(second, **{k: v for k, v in kwargs.items() if k != "lr"}, lr=123.0)
    resumed.load_state_dict(io.load(path))
    assert resumed.param_groups[0]["lr"] == kwargs["lr"]
    for step in range(3, 6):
        for a, b, g in zip(first, second, grads[step]):
            a.grad = ag.tensor(g)
            b.grad = ag.tensor(g)
        opt.step()
        resumed.step()
        for a, b in zip(first, second):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_state_dict_layout_matches_torch():
    rng = np.random.default_rng(5)
    ours, theirs = pair_params(rng, SHAPES)
    opt, topt = optim.Adam(ours, lr=1e-2, amsgrad=True), torch.optim.Adam(theirs, lr=1e-2, amsgrad=True)
    set_grads(rng, ours, theirs)
    opt.step()
    topt.step()
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert sd["param_groups"][0]["params"] == tsd["param_groups"][0]["params"]
    assert set(sd["state"]) == set(tsd["state"])
    for idx, entry in sd["state"].items():
        assert set(entry) == set(tsd["state"][idx])
        assert float(np.asarray(entry["step"])) == float(tsd["state"][idx]["step"])
        for name in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            np.testing.assert_allclose(np.asarray(entry[name]), tsd["state"][idx][name].numpy(), rtol=RTOL, atol=1e-7)


def test_loads_a_torch_optimizer_state_dict_and_continues_like_torch():
    rng = np.random.default_rng(6)
    _, theirs = pair_params(rng, SHAPES)
    topt = torch.optim.SGD(theirs, lr=0.1, momentum=0.9)
    for _ in range(2):
        for tp in theirs:
            tp.grad = torch.tensor(rng.standard_normal(tp.shape).astype(np.float32))
        topt.step()
    ours = [nn.Parameter(ag.tensor(tp.detach().numpy())) for tp in theirs]
    opt = optim.SGD(ours, lr=0.5)
    opt.load_state_dict(topt.state_dict())
    assert opt.param_groups[0]["momentum"] == 0.9
    for step in range(3):
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
        assert_params_close(ours, theirs, step, RTOL, ATOL)


def test_bad_state_dict_is_rejected_without_changing_anything():
    rng = np.random.default_rng(7)
    ours, _ = pair_params(rng, SHAPES)
    opt = optim.Adam(ours, lr=1e-2)
    for p in ours:
        p.grad = ag.tensor(rng.standard_normal(p.shape).astype(np.float32))
    opt.step()
    sd = optim.flatten_state_dict(opt.state_dict())
    bad = dict(sd)
    bad["state.0.exp_avg"] = np.zeros((7,), np.float32)
    with pytest.raises(ValueError, match="exp_avg"):
        opt.load_state_dict(bad)
    with pytest.raises(ValueError, match="parameter groups"):
        optim.Adam([{"params": ours[:1]}, {"params": ours[1:]}]).load_state_dict(sd)
    assert opt.state[ours[0]]["step"] == 1
    np.testing.assert_array_equal(opt.state[ours[0]]["exp_avg"].numpy(), sd["state.0.exp_avg"])


# ---------------------------------------------------------------- schedulers

def _torch_lrs(make_scheduler, lrs, steps):
    params = [torch.zeros(1, requires_grad=True) for _ in lrs]
    topt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)])
    sched = make_scheduler(topt)
    seen = [sched.get_last_lr()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            topt.step()
            sched.step()
            seen.append(sched.get_last_lr())
    return seen


def _our_lrs(make_scheduler, lrs, steps):
    params = [nn.Parameter(ag.zeros(1)) for _ in lrs]
    opt = optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)])
    sched = make_scheduler(opt)
    seen = [sched.get_last_lr()]
    for _ in range(steps):
        opt.step()
        sched.step()
        seen.append(sched.get_last_lr())
        assert [g["lr"] for g in opt.param_groups] == seen[-1]
    return seen


SCHEDULES = [
    ("step", lambda o: optim.StepLR(o, step_size=3, gamma=0.5),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5)),
    ("cosine", lambda o: optim.CosineAnnealingLR(o, T_max=5, eta_min=0.01),
     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01)),
    ("warmup", lambda o: optim.LinearWarmup(o, warmup_steps=4, start_factor=0.25),
     lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4)),
    ("warmup-default", lambda o: optim.LinearWarmup(o, warmup_steps=3),
     lambda o: torch.optim.lr_scheduler.LinearLR(o, total_iters=3)),
]


@pytest.mark.parametrize("name,ours,theirs", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_scheduler_lr_sequence_matches_torch(name, ours, theirs):
    lrs = [0.1, 0.03]
    np.testing.assert_allclose(_our_lrs(ours, lrs, 14), _torch_lrs(theirs, lrs, 14), rtol=1e-12, atol=1e-15)


def test_linear_warmup_formula():
    opt = optim.SGD([nn.Parameter(ag.zeros(1))], lr=1.0)
    sched = optim.LinearWarmup(opt, warmup_steps=4, start_factor=0.2)
    seen = [sched.get_last_lr()[0]]
    for _ in range(5):
        sched.step()
        seen.append(sched.get_last_lr()[0])
    np.testing.assert_allclose(seen, [0.2, 0.4, 0.6, 0.8, 1.0, 1.0])


def test_scheduler_changes_the_update_size():
    p = nn.Parameter(ag.tensor([0.0]))
    opt = optim.SGD([p], lr=1.0)
    sched = optim.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(3):
        p.grad = ag.tensor([1.0])
        opt.step()
        sched.step()
    np.testing.assert_allclose(p.numpy(), [-(1.0 + 0.5 + 0.25)])


def test_scheduler_state_dict_resumes():
    def run(steps, state=None):
        opt = optim.SGD([nn.Parameter(ag.zeros(1))], lr=0.1)
        sched = optim.CosineAnnealingLR(opt, T_max=6)
        if state is not None:
            opt.load_state_dict(state[0])
            sched.load_state_dict(state[1])
        for _ in range(steps):
            sched.step()
        return opt, sched

    opt, sched = run(3)
    saved = (optim.flatten_state_dict(opt.state_dict()), sched.state_dict())
    _, straight = run(7)
    _, resumed = run(4, saved)
    assert resumed.last_epoch == straight.last_epoch == 7
    np.testing.assert_allclose(resumed.get_last_lr(), straight.get_last_lr(), rtol=1e-12)
