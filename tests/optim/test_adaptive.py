"""Adadelta, Adagrad, RMSprop, NAdam, RAdam, Adamax, Rprop, ASGD against torch.optim: same parameters and gradients,
parameters compared after every step; state dicts in torch's layout, round trips and torch's own."""

import warnings

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu import io, nn, optim

from .pairs import assert_params_close, pair_params, set_grads

SHAPES = [(3, 5), (7,), (2, 3, 3)]
RTOL, ATOL = 2e-5, 1e-6
STEPS = 7


CASES = [
    ("Adadelta", dict()),
    ("Adadelta", dict(lr=0.5, rho=0.8, eps=1e-5, weight_decay=0.1)),
    ("Adadelta", dict(lr=2.0, maximize=True)),
    ("Adagrad", dict()),
    ("Adagrad", dict(lr=0.1, lr_decay=0.05, weight_decay=0.02, initial_accumulator_value=0.3, eps=1e-6)),
    ("Adagrad", dict(lr=0.05, maximize=True)),
    ("RMSprop", dict()),
    ("RMSprop", dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.05)),
    ("RMSprop", dict(lr=0.01, momentum=0.9)),
    ("RMSprop", dict(lr=0.005, centered=True)),
    ("RMSprop", dict(lr=0.005, centered=True, momentum=0.7, weight_decay=0.01, maximize=True)),
    ("NAdam", dict()),
    ("NAdam", dict(lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, momentum_decay=0.01)),
    ("NAdam", dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    ("RAdam", dict()),
    ("RAdam", dict(lr=0.01, betas=(0.9, 0.9), weight_decay=0.1)),  # beta2=0.9: rectified from step 6 on
    ("RAdam", dict(lr=0.01, betas=(0.5, 0.8), weight_decay=0.2, decoupled_weight_decay=True, maximize=True)),
    ("Adamax", dict()),
    ("Adamax", dict(lr=0.01, betas=(0.8, 0.9), eps=1e-4, weight_decay=0.1, maximize=True)),
    ("Rprop", dict()),
    ("Rprop", dict(lr=0.05, etas=(0.3, 1.5), step_sizes=(1e-3, 0.2), maximize=True)),
    ("ASGD", dict()),
    ("ASGD", dict(lr=0.05, lambd=0.01, alpha=0.6, t0=3, weight_decay=0.1)),  # averaging from step 4 on
    ("ASGD", dict(lr=0.1, maximize=True)),
]


@pytest.mark.parametrize("name,kwargs", CASES, ids=[f"{n}-{'-'.join(k) or 'defaults'}" for n, k in CASES])
def test_matches_torch_step_for_step(name, kwargs):
    rng = np.random.default_rng(0)
    ours, theirs = pair_params(rng, SHAPES)
    opt, topt = getattr(optim, name)(ours, **kwargs), getattr(torch.optim, name)(theirs, **kwargs)
    for step in range(STEPS):
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
        assert_params_close(ours, theirs, step, RTOL, ATOL)


def test_radam_switches_to_the_rectified_step():
    """With beta2 = 0.8 rho_t passes 5 at step 3: both branches are taken within a few steps."""
    rng = np.random.default_rng(1)
    ours, theirs = pair_params(rng, [(4, 3)])
    opt, topt = optim.RAdam(ours, lr=0.1, betas=(0.9, 0.8)), torch.optim.RAdam(theirs, lr=0.1, betas=(0.9, 0.8))
    for step in range(6):
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
        assert_params_close(ours, theirs, step, RTOL, ATOL)


def test_defaults_match_torch():
    p = [nn.Parameter(ag.zeros(2))]
    tp = [torch.zeros(2, requires_grad=True)]
    for name in ("Adadelta", "Adagrad", "RMSprop", "NAdam", "RAdam", "Adamax", "Rprop", "ASGD"):
        ours = getattr(optim, name)(p).param_groups[0]
        theirs = getattr(torch.optim, name)(tp).param_groups[0]
        for key, value in ours.items():
            if key != "params":
                assert theirs[key] == value, f"{name}: {key} is {value}, torch has {theirs[key]}"


def test_training_a_model_with_rmsprop_matches_torch():
    """Gradients from anygpu's autograd through a small model, centered RMSprop with momentum."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((9, 5)).astype(np.float32)
    y = rng.standard_normal((9, 3)).astype(np.float32)
    model, tmodel = nn.Linear(5, 3), torch.nn.Linear(5, 3)
    model.load_state_dict(tmodel.state_dict())
    opt = optim.RMSprop(model.parameters(), lr=0.01, momentum=0.5, centered=True)
    topt = torch.optim.RMSprop(tmodel.parameters(), lr=0.01, momentum=0.5, centered=True)
    for step in range(5):
        opt.zero_grad()
        loss = ((model(ag.tensor(x)) - ag.tensor(y)) ** 2).mean()
        loss.backward()
        opt.step()
        topt.zero_grad()
        tloss = ((tmodel(torch.tensor(x)) - torch.tensor(y)) ** 2).mean()
        tloss.backward()
        topt.step()
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-5)
    np.testing.assert_allclose(model.weight.numpy(), tmodel.weight.detach().numpy(), rtol=1e-4, atol=1e-6)


STATE_CASES = [("Adadelta", dict(lr=0.5)), ("Adagrad", dict(lr=0.1, initial_accumulator_value=0.1)),
               ("RMSprop", dict(lr=0.01, momentum=0.9, centered=True)), ("NAdam", dict(lr=0.01)),
               ("RAdam", dict(lr=0.01)), ("Adamax", dict(lr=0.01)), ("Rprop", dict(lr=0.02)),
               ("ASGD", dict(lr=0.05, t0=1))]


@pytest.mark.parametrize("name,kwargs", STATE_CASES, ids=[c[0] for c in STATE_CASES])
def test_state_dict_layout_matches_torch(name, kwargs):
    rng = np.random.default_rng(3)
    ours, theirs = pair_params(rng, SHAPES)
    opt, topt = getattr(optim, name)(ours, **kwargs), getattr(torch.optim, name)(theirs, **kwargs)
    for _ in range(2):
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
    sd, tsd = opt.state_dict(), topt.state_dict()
    assert set(sd["state"]) == set(tsd["state"])
    for idx, entry in sd["state"].items():
        assert set(entry) == set(tsd["state"][idx]), name
        for key, value in entry.items():
            np.testing.assert_allclose(np.asarray(value, np.float64), tsd["state"][idx][key].double().numpy(),
                                       rtol=RTOL, atol=1e-7, err_msg=f"{name} state {key}")


@pytest.mark.parametrize("name,kwargs", STATE_CASES, ids=[c[0] for c in STATE_CASES])
def test_state_dict_round_trip_through_a_checkpoint(tmp_path, name, kwargs):
    rng = np.random.default_rng(4)
    first, _ = pair_params(rng, SHAPES)
    opt = getattr(optim, name)(first, **kwargs)
    grads = [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(6)]
    for step in range(3):
        for p, g in zip(first, grads[step]):
            p.grad = ag.tensor(g)
        opt.step()
    path = tmp_path / "opt.safetensors"
    io.save(optim.flatten_state_dict(opt.state_dict()), path)
    second = [nn.Parameter(ag.tensor(p.numpy())) for p in first]
    resumed = getattr(optim, name)(second, lr=123.0)
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


@pytest.mark.parametrize("name,kwargs", STATE_CASES, ids=[c[0] for c in STATE_CASES])
def test_loads_a_torch_state_dict_and_continues_like_torch(name, kwargs):
    rng = np.random.default_rng(5)
    _, theirs = pair_params(rng, SHAPES)
    topt = getattr(torch.optim, name)(theirs, **kwargs)
    for _ in range(3):
        for tp in theirs:
            tp.grad = torch.tensor(rng.standard_normal(tp.shape).astype(np.float32))
        topt.step()
    ours = [nn.Parameter(ag.tensor(tp.detach().numpy())) for tp in theirs]
    opt = getattr(optim, name)(ours, lr=7.0)
    opt.load_state_dict(topt.state_dict())
    assert opt.param_groups[0]["lr"] == kwargs["lr"]
    for step in range(3):
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
        assert_params_close(ours, theirs, step, RTOL, ATOL)


def test_adagrad_state_exists_before_the_first_step():
    p = nn.Parameter(ag.zeros(3))
    opt = optim.Adagrad([p], initial_accumulator_value=0.25)
    np.testing.assert_array_equal(opt.state[p]["sum"].numpy(), np.full(3, 0.25, np.float32))
    assert opt.state[p]["step"] == 0


def test_params_without_grad_are_left_alone():
    p, q = nn.Parameter(ag.ones(2)), nn.Parameter(ag.ones(3))
    for name in ("Adadelta", "RMSprop", "NAdam", "RAdam", "Adagrad"):
        opt = getattr(optim, name)([p, q], lr=0.1)
        p.grad, q.grad = ag.ones(2), None
        opt.step()
        np.testing.assert_array_equal(q.numpy(), np.ones(3, np.float32))
        assert q not in opt.state or opt.state[q]["step"] == 0


@pytest.mark.parametrize("make,match", [
    (lambda p: optim.Adadelta(p, rho=1.5), "rho"),
    (lambda p: optim.Adagrad(p, lr=-1.0), "learning rate"),
    (lambda p: optim.RMSprop(p, alpha=-0.1), "alpha"),
    (lambda p: optim.NAdam(p, betas=(1.0, 0.9)), "beta"),
    (lambda p: optim.RAdam(p, eps=-1.0), "epsilon"),
    (lambda p: optim.RMSprop(p, capturable=True), "capturable"),
])
def test_rejects_bad_arguments(make, match):
    with pytest.raises(ValueError, match=match):
        make([nn.Parameter(ag.zeros(2))])


def test_one_kernel_per_parameter_per_step():
    rng = np.random.default_rng(6)
    ours, _ = pair_params(rng, SHAPES)
    dev = ag.gpu()
    for name, kwargs in [("RMSprop", dict(momentum=0.9, centered=True)), ("NAdam", {}), ("Adadelta", {})]:
        opt = getattr(optim, name)(ours, **kwargs)
        for p in ours:
            p.grad = ag.tensor(rng.standard_normal(p.shape).astype(np.float32))
        opt.step()  # the first step allocates state
        dev.flush()
        before = dev.stats["dispatches"]
        opt.step()
        assert dev.stats["dispatches"] - before == len(ours), name


# ---------------------------------------------------------------- schedulers

def _lr_sequences(make_ours, make_theirs, lrs, steps, optimizer=("SGD", dict(momentum=0.9))):
    name, kwargs = optimizer
    params = [nn.Parameter(ag.zeros(1)) for _ in lrs]
    opt = getattr(optim, name)([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)], **kwargs)
    tparams = [torch.zeros(1, requires_grad=True) for _ in lrs]
    topt = getattr(torch.optim, name)([{"params": [p], "lr": lr} for p, lr in zip(tparams, lrs)], **kwargs)
    sched, tsched = make_ours(opt), make_theirs(topt)
    ours, theirs = [sched.get_last_lr()], [tsched.get_last_lr()]
    momenta, tmomenta = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(steps):
            opt.step()
            topt.step()
            sched.step()
            tsched.step()
            ours.append(sched.get_last_lr())
            theirs.append(tsched.get_last_lr())
            assert [g["lr"] for g in opt.param_groups] == ours[-1]
            key = "betas" if "betas" in opt.defaults else "momentum"
            momenta.append([g[key] for g in opt.param_groups])
            tmomenta.append([g[key] for g in topt.param_groups])
    return ours, theirs, momenta, tmomenta


LR = torch.optim.lr_scheduler
SCHEDULES = [
    ("lambda", lambda o: optim.LambdaLR(o, lambda e: 0.95 ** e + 0.1 * (e % 3)),
     lambda o: LR.LambdaLR(o, lambda e: 0.95 ** e + 0.1 * (e % 3)), 12),
    ("lambda-list", lambda o: optim.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e]),
     lambda o: LR.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: e]), 8),
    ("multistep", lambda o: optim.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3),
     lambda o: LR.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3), 12),
    ("exponential", lambda o: optim.ExponentialLR(o, gamma=0.87), lambda o: LR.ExponentialLR(o, gamma=0.87), 15),
    ("onecycle-cos", lambda o: optim.OneCycleLR(o, max_lr=[0.5, 0.2], total_steps=17),
     lambda o: LR.OneCycleLR(o, max_lr=[0.5, 0.2], total_steps=17), 17),
    ("onecycle-linear", lambda o: optim.OneCycleLR(o, max_lr=0.3, epochs=3, steps_per_epoch=5, pct_start=0.4,
                                                   anneal_strategy="linear", div_factor=10.0,
                                                   final_div_factor=100.0, base_momentum=0.8, max_momentum=0.9),
     lambda o: LR.OneCycleLR(o, max_lr=0.3, epochs=3, steps_per_epoch=5, pct_start=0.4, anneal_strategy="linear",
                             div_factor=10.0, final_div_factor=100.0, base_momentum=0.8, max_momentum=0.9), 15),
    ("onecycle-three-phase", lambda o: optim.OneCycleLR(o, max_lr=1.0, total_steps=23, three_phase=True),
     lambda o: LR.OneCycleLR(o, max_lr=1.0, total_steps=23, three_phase=True), 23),
    ("onecycle-no-momentum", lambda o: optim.OneCycleLR(o, max_lr=0.1, total_steps=9, cycle_momentum=False),
     lambda o: LR.OneCycleLR(o, max_lr=0.1, total_steps=9, cycle_momentum=False), 9),
    ("constant", lambda o: optim.ConstantLR(o, factor=0.4, total_iters=3),
     lambda o: LR.ConstantLR(o, factor=0.4, total_iters=3), 7),
    ("linear", lambda o: optim.LinearLR(o, start_factor=0.2, end_factor=0.7, total_iters=5),
     lambda o: LR.LinearLR(o, start_factor=0.2, end_factor=0.7, total_iters=5), 9),
    ("polynomial", lambda o: optim.PolynomialLR(o, total_iters=6, power=2.0),
     lambda o: LR.PolynomialLR(o, total_iters=6, power=2.0), 9),
    ("warm-restarts", lambda o: optim.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.001),
     lambda o: LR.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.001), 20),
    ("sequential-warmup-cosine",
     lambda o: optim.SequentialLR(o, [optim.LinearLR(o, start_factor=0.1, total_iters=3),
                                      optim.CosineAnnealingLR(o, T_max=8, eta_min=0.001)], milestones=[3]),
     lambda o: LR.SequentialLR(o, [LR.LinearLR(o, start_factor=0.1, total_iters=3),
                                   LR.CosineAnnealingLR(o, T_max=8, eta_min=0.001)], milestones=[3]), 14),
    ("sequential-three",
     lambda o: optim.SequentialLR(o, [optim.ConstantLR(o, factor=0.5, total_iters=2), optim.ExponentialLR(o, 0.9),
                                      optim.MultiStepLR(o, [1, 3], gamma=0.5)], milestones=[2, 6]),
     lambda o: LR.SequentialLR(o, [LR.ConstantLR(o, factor=0.5, total_iters=2), LR.ExponentialLR(o, 0.9),
                                   LR.MultiStepLR(o, [1, 3], gamma=0.5)], milestones=[2, 6]), 12),
    ("sequential-step-poly",
     lambda o: optim.SequentialLR(o, [optim.StepLR(o, 2, 0.5), optim.PolynomialLR(o, total_iters=4, power=2.0)],
                                  milestones=[5]),
     lambda o: LR.SequentialLR(o, [LR.StepLR(o, 2, 0.5), LR.PolynomialLR(o, total_iters=4, power=2.0)],
                               milestones=[5]), 10),
    ("multiplicative", lambda o: optim.MultiplicativeLR(o, lambda e: 0.9 + 0.01 * e),
     lambda o: LR.MultiplicativeLR(o, lambda e: 0.9 + 0.01 * e), 8),
    ("cyclic-triangular", lambda o: optim.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=2),
     lambda o: LR.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=2), 13),
    ("cyclic-triangular2", lambda o: optim.CyclicLR(o, [0.01, 0.02], [0.1, 0.3], step_size_up=2, mode="triangular2",
                                                    base_momentum=0.7, max_momentum=0.95),
     lambda o: LR.CyclicLR(o, [0.01, 0.02], [0.1, 0.3], step_size_up=2, mode="triangular2", base_momentum=0.7,
                           max_momentum=0.95), 13),
    ("cyclic-exp-range", lambda o: optim.CyclicLR(o, 0.01, 0.1, step_size_up=4, mode="exp_range", gamma=0.9,
                                                  cycle_momentum=False),
     lambda o: LR.CyclicLR(o, 0.01, 0.1, step_size_up=4, mode="exp_range", gamma=0.9, cycle_momentum=False), 13),
    ("cyclic-custom", lambda o: optim.CyclicLR(o, 0.01, 0.1, step_size_up=2, scale_fn=lambda c: 1 / c,
                                               scale_mode="cycle"),
     lambda o: LR.CyclicLR(o, 0.01, 0.1, step_size_up=2, scale_fn=lambda c: 1 / c, scale_mode="cycle"), 11),
    ("chained",
     lambda o: optim.ChainedScheduler([optim.ConstantLR(o, factor=0.5, total_iters=3), optim.ExponentialLR(o, 0.9)]),
     lambda o: LR.ChainedScheduler([LR.ConstantLR(o, factor=0.5, total_iters=3), LR.ExponentialLR(o, 0.9)]), 8),
]


@pytest.mark.parametrize("name,ours,theirs,steps", SCHEDULES, ids=[s[0] for s in SCHEDULES])
def test_scheduler_lr_sequence_matches_torch(name, ours, theirs, steps):
    lrs = [0.1, 0.03]
    seq, tseq, momenta, tmomenta = _lr_sequences(ours, theirs, lrs, steps)
    assert seq == tseq
    assert momenta == tmomenta


def test_one_cycle_cycles_adam_beta1_like_torch():
    seq, tseq, betas, tbetas = _lr_sequences(lambda o: optim.OneCycleLR(o, max_lr=0.01, total_steps=11),
                                             lambda o: LR.OneCycleLR(o, max_lr=0.01, total_steps=11), [1e-3], 11,
                                             optimizer=("Adam", {}))
    assert seq == tseq
    assert betas == tbetas
    assert len({b[0][0] for b in betas}) > 3  # beta1 really moves


def test_one_cycle_refuses_to_step_past_total_steps():
    opt = optim.SGD([nn.Parameter(ag.zeros(1))], lr=0.1, momentum=0.9)
    sched = optim.OneCycleLR(opt, max_lr=0.1, total_steps=3)
    for _ in range(3):
        sched.step()
    with pytest.raises(ValueError, match="total steps"):
        sched.step()
    with pytest.raises(ValueError, match="momentum"):
        optim.OneCycleLR(optim.Adagrad([nn.Parameter(ag.zeros(1))]), max_lr=0.1, total_steps=3)
    with pytest.raises(ValueError, match="total_steps"):
        optim.OneCycleLR(opt, max_lr=0.1)


PLATEAU_CASES = [
    dict(),
    dict(mode="max", factor=0.5, patience=1, threshold=0.05, threshold_mode="abs", cooldown=2, min_lr=0.004),
    dict(factor=0.2, patience=2, threshold=0.01, cooldown=1, min_lr=[0.01, 0.0], eps=1e-3),
]


@pytest.mark.parametrize("kwargs", PLATEAU_CASES, ids=["defaults", "max-abs-cooldown", "rel-min-lrs"])
def test_reduce_lr_on_plateau_matches_torch(kwargs):
    rng = np.random.default_rng(7)
    metrics = np.concatenate([np.linspace(1.0, 0.5, 6), 0.5 + 0.01 * rng.standard_normal(30),
                              np.linspace(0.5, 0.2, 5), np.full(30, 0.2)])
    params = [nn.Parameter(ag.zeros(1)), nn.Parameter(ag.zeros(1))]
    opt = optim.SGD([{"params": [params[0]], "lr": 0.1}, {"params": [params[1]], "lr": 0.05}])
    tparams = [torch.zeros(1, requires_grad=True), torch.zeros(1, requires_grad=True)]
    topt = torch.optim.SGD([{"params": [tparams[0]], "lr": 0.1}, {"params": [tparams[1]], "lr": 0.05}])
    sched, tsched = optim.ReduceLROnPlateau(opt, **kwargs), LR.ReduceLROnPlateau(topt, **kwargs)
    changes = 0
    for i, metric in enumerate(metrics):
        metric = float(np.float32(metric))  # exact as a 0-d anygpu tensor too
        before = sched.get_last_lr()
        sched.step(ag.tensor(metric) if i % 2 else metric)
        tsched.step(metric)
        assert sched.get_last_lr() == tsched.get_last_lr(), f"epoch {i}"
        assert [g["lr"] for g in opt.param_groups] == sched.get_last_lr()
        changes += before != sched.get_last_lr()
        assert (sched.num_bad_epochs, sched.cooldown_counter, sched.best) == \
            (tsched.num_bad_epochs, tsched.cooldown_counter, tsched.best)
    assert changes >= 2


def test_reduce_lr_on_plateau_rejects_bad_arguments():
    opt = optim.SGD([nn.Parameter(ag.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="Factor"):
        optim.ReduceLROnPlateau(opt, factor=1.0)
    with pytest.raises(ValueError, match="mode"):
        optim.ReduceLROnPlateau(opt, mode="median")
    with pytest.raises(ValueError, match="min_lrs"):
        optim.ReduceLROnPlateau(opt, min_lr=[0.1, 0.2])


@pytest.mark.parametrize("make", [
    lambda o: optim.MultiStepLR(o, milestones=[3, 6], gamma=0.5),
    lambda o: optim.ExponentialLR(o, gamma=0.9),
    lambda o: optim.OneCycleLR(o, max_lr=0.4, total_steps=12, three_phase=True),
    lambda o: optim.LambdaLR(o, lambda e: 1.0 / (1 + e)),
    lambda o: optim.SequentialLR(o, [optim.LinearLR(o, 0.2, total_iters=3), optim.CosineAnnealingLR(o, 10)], [3]),
], ids=["multistep", "exponential", "onecycle", "lambda", "sequential"])
def test_scheduler_state_dict_resumes(make):
    def fresh():
        opt = optim.SGD([nn.Parameter(ag.zeros(1))], lr=0.1, momentum=0.9)
        return opt, make(opt)

    opt, sched = fresh()
    for _ in range(4):
        sched.step()
    saved = (optim.flatten_state_dict(opt.state_dict()), sched.state_dict())
    for _ in range(5):
        sched.step()
    opt2, sched2 = fresh()
    opt2.load_state_dict(saved[0])
    sched2.load_state_dict(saved[1])
    for _ in range(5):
        sched2.step()
    assert sched2.get_last_lr() == sched.get_last_lr()
    assert sched2.last_epoch == sched.last_epoch == 9


def test_lambda_lr_state_dict_keeps_callable_objects_state():
    class Decay:
        def __init__(self):
            self.rate = 0.5

        def __call__(self, epoch):
            return self.rate ** epoch

    opt = optim.SGD([nn.Parameter(ag.zeros(1))], lr=1.0)
    fn = Decay()
    sched = optim.LambdaLR(opt, fn)
    fn.rate = 0.25
    state = sched.state_dict()
    assert state["lr_lambdas"] == [{"rate": 0.25}]
    other = Decay()
    optim.LambdaLR(optim.SGD([nn.Parameter(ag.zeros(1))], lr=1.0), other).load_state_dict(state)
    assert other.rate == 0.25
    plain = optim.LambdaLR(optim.SGD([nn.Parameter(ag.zeros(1))], lr=1.0), lambda e: 1.0)
    assert plain.state_dict()["lr_lambdas"] == [None]


def test_reduce_lr_on_plateau_state_dict_resumes():
    opt = optim.SGD([nn.Parameter(ag.zeros(1))], lr=1.0)
    sched = optim.ReduceLROnPlateau(opt, patience=1)
    for metric in (1.0, 1.0, 1.0):
        sched.step(metric)
    state = sched.state_dict()
    opt2 = optim.SGD([nn.Parameter(ag.zeros(1))], lr=1.0)
    opt2.load_state_dict(opt.state_dict())
    sched2 = optim.ReduceLROnPlateau(opt2, patience=1)
    sched2.load_state_dict(state)
    for metric in (1.0, 1.0):
        sched.step(metric)
        sched2.step(metric)
    assert sched2.get_last_lr() == sched.get_last_lr() == [1.0 * 0.1 * 0.1]


def test_warm_restarts_with_fractional_epochs_match_torch():
    opt = optim.SGD([nn.Parameter(ag.zeros(1))], lr=0.1)
    topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    sched = optim.CosineAnnealingWarmRestarts(opt, T_0=4, T_mult=2)
    tsched = LR.CosineAnnealingWarmRestarts(topt, T_0=4, T_mult=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for epoch in np.arange(0.0, 15.0, 0.7):
            sched.step(float(epoch))
            tsched.step(float(epoch))
            assert sched.get_last_lr() == tsched.get_last_lr(), epoch


def test_asgd_average_follows_torch():
    """ASGD's running average ax (the point to evaluate at), eta and mu, step by step as torch's."""
    rng = np.random.default_rng(7)
    ours, theirs = pair_params(rng, SHAPES)
    kwargs = dict(lr=0.05, lambd=0.02, t0=2, weight_decay=0.01)
    opt, topt = optim.ASGD(ours, **kwargs), torch.optim.ASGD(theirs, **kwargs)
    for step in range(6):
        set_grads(rng, ours, theirs)
        opt.step()
        topt.step()
        for p, tp in zip(ours, theirs):
            ts = topt.state[tp]
            np.testing.assert_allclose(opt.state[p]["ax"].numpy(), ts["ax"].numpy(), rtol=RTOL, atol=ATOL)
            assert np.float32(opt.state[p]["eta"]) == ts["eta"].item() and np.float32(opt.state[p]["mu"]) == ts["mu"].item()
