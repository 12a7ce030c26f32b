"""anygpu.compile on the common shapes of a training step (issue 28): a step closing over
its batch, taking it positionally or by keyword, returning None / the loss / a tuple, with
zero_grad(set_to_none=True), a scheduler stepping outside, gradient clipping, GradScaler,
and a nanoGPT-style step -- each replayed (reason() None, replays counted) and giving the
same losses and weights as the same step run eagerly; reason() says why a step is eager,
and ANYGPU_COMPILE_DEBUG=1 prints the first difference between two recordings."""

import math

import numpy as np
import pytest

import anygpu as ag
import anygpu.nn.functional as F
from anygpu import nn
from anygpu.bench.suite import gpt_module
from anygpu.ops import tuner

STEPS = 7


def _mlp():
    ag.manual_seed(0)
    return nn.Sequential(nn.Linear(13, 17), nn.ReLU(), nn.Linear(17, 5))


def _batches(seed=0, n=STEPS, rows=9):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((rows, 13)).astype(np.float32), rng.integers(0, 5, rows).astype(np.int32))
            for _ in range(n)]


def _value(out):
    """The numbers a step returned (None, a Tensor, or a tuple of them)."""
    if out is None:
        return None
    if isinstance(out, (tuple, list)):
        return [_value(o) for o in out]
    return out.numpy().copy()


def _assert_same_run(make, call, batches=None, replays=3, rtol=0.0):
    """Run make() twice -- one step eager, one compiled -- over the same batches: same
    returns, same weights (bit for bit, or to `rtol`); the compiled one replays at least
    `replays` times."""
    batches = batches or _batches()
    eager_model, eager_step, eager_after = make()
    model, step, after = make()
    compiled = ag.compile(step)
    for x, y in batches:
        want = _value(call(eager_step, ag.tensor(x), ag.tensor(y)))
        eager_after()
        got = _value(call(compiled, ag.tensor(x), ag.tensor(y)))
        after()
        if want is None:
            assert got is None
        else:
            for g, w in zip(got, want) if isinstance(want, list) else [(got, want)]:
                np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol)
    for p_eager, p in zip(eager_model.parameters(), model.parameters()):
        np.testing.assert_allclose(p.numpy(), p_eager.numpy(), rtol=rtol, atol=rtol)
    assert compiled.stats["replayed"] >= replays, (compiled.stats, compiled.reason())
    return compiled


def _sgd_step(set_to_none=True, returns="loss", clip=None):
    def make():
        model = _mlp()
        opt = ag.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

        def step(x, y):
            opt.zero_grad(set_to_none=set_to_none)
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            return {"loss": loss, "none": None, "tuple": (loss, logits)}[returns]
        return model, step, lambda: None
    return make


def test_args_returning_the_loss():
    step = _assert_same_run(_sgd_step(), lambda s, x, y: s(x, y))
    assert step.reason(ag.zeros(9, 13), ag.zeros(9, dtype=ag.int32)) is None


def test_keyword_arguments():
    step = _assert_same_run(_sgd_step(), lambda s, x, y: s(x=x, y=y))
    assert step.reason(x=ag.zeros(9, 13), y=ag.zeros(9, dtype=ag.int32)) is None
    assert step.reason(ag.zeros(9, 13), ag.zeros(9, dtype=ag.int32)) == \
        "not called yet with these arguments' shapes and dtypes"


@pytest.mark.parametrize("returns", ["none", "tuple"])
def test_returning_none_or_a_tuple(returns):
    step = _assert_same_run(_sgd_step(returns=returns), lambda s, x, y: s(x, y))
    assert step.reason() is None


def test_zero_grad_without_set_to_none():
    """backward adds into the zeroed .grad in place (as torch's AccumulateGrad), so the
    gradient is the same buffer each call and the step repeats."""
    step = _assert_same_run(_sgd_step(set_to_none=False), lambda s, x, y: s(x, y))
    assert step.reason() is None


def test_gradient_clipping():
    _assert_same_run(_sgd_step(clip=0.05), lambda s, x, y: s(x, y))


_BATCH: dict = {}   # a module global the step below names


def _global_step_maker():
    model = _mlp()
    opt = ag.optim.Adam(model.parameters(), lr=0.01)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(_BATCH["x"]), _BATCH["y"])
        loss.backward()
        opt.step()
        return loss
    return model, step, lambda: None


def test_a_step_without_arguments_closing_over_its_batch():
    """A new batch each call, in a closure variable and in a module global."""
    def make_closure():
        model = _mlp()
        opt = ag.optim.AdamW(model.parameters(), lr=0.01)
        batch = [None, None]

        def step():
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(batch[0]), batch[1])
            loss.backward()
            opt.step()
            return loss
        step.batch = batch
        return model, step, lambda: None

    def call_closure(s, x, y):
        fn = getattr(s, "fn", s)
        fn.batch[0], fn.batch[1] = x, y
        return s()

    step = _assert_same_run(make_closure, call_closure)
    assert step.reason() is None

    def call_global(s, x, y):
        _BATCH["x"], _BATCH["y"] = x, y
        return s()
    step = _assert_same_run(_global_step_maker, call_global)
    assert step.reason() is None


def test_a_closed_over_tensor_written_in_place_gets_the_result():
    model = _mlp()
    total = ag.zeros(())
    batch = {}

    def step():
        loss = F.cross_entropy(model(batch["x"]), batch["y"])
        total.add_(loss.detach())
        return loss

    compiled = ag.compile(step)
    want = 0.0
    for x, y in _batches():
        batch["x"], batch["y"] = ag.tensor(x), ag.tensor(y)
        want += float(compiled().item())
    assert compiled.stats["replayed"] >= 3, compiled.reason()
    assert math.isclose(float(total.item()), want, rel_tol=1e-6)


def test_a_scheduler_stepping_outside():
    def make():
        model = _mlp()
        opt = ag.optim.SGD(model.parameters(), lr=0.2)
        sched = ag.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)

        def step(x, y):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return model, step, sched.step
    _assert_same_run(make, lambda s, x, y: s(x, y))


def _scaler_step(optimizer="sgd", full=False, **scaler_args):
    """A GradScaler step; full: torch's documented form with unscale_ and clipping, the
    gradients zeroed in place (zero_grad(set_to_none=False)) and SGD with momentum."""
    def make():
        model = _mlp()
        opt = (ag.optim.SGD(model.parameters(), lr=0.1, momentum=0.9 if full else 0.0, dampening=0.1 if full else 0.0)
               if optimizer == "sgd" else getattr(ag.optim, optimizer)(model.parameters(), lr=0.01))
        scaler = ag.amp.GradScaler(init_scale=256.0, **scaler_args)

        def step(x, y):
            opt.zero_grad(set_to_none=not full)
            loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            if full:
                scaler.unscale_(opt)
                nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            scaler.step(opt)
            scaler.update()
            return loss
        scales = []
        make.scalers.append((scaler, scales))
        return model, step, lambda: scales.append(scaler.get_scale())  # read outside the step
    make.scalers = []
    return make


@pytest.mark.parametrize("optimizer", ["Adagrad", "Adamax", "NAdam", "RAdam", "RMSprop", "Adadelta", "Rprop"])
def test_grad_scaler_with_an_optimizer_without_the_flag_runs_eagerly_saying_why(optimizer):
    """These optimizers still read found_inf back to decide on the host (amp.py)."""
    step = _assert_same_run(_scaler_step(optimizer), lambda s, x, y: s(x, y), replays=0)
    why = step.reason()
    assert why.startswith("the step reads values back to the host (at amp.py:") and " in step: " in why, why
    assert "scaler.step(opt)" in why  # the user's line that led there


@pytest.mark.parametrize("optimizer", ["sgd", "Adam", "AdamW"])
def test_grad_scaler_is_replayed(optimizer):
    step = _assert_same_run(_scaler_step(optimizer), lambda s, x, y: s(x, y))
    assert step.reason() is None


def _torch_scaler_run(weights, batches, growth_interval):
    """The full scaler step of _scaler_step in torch on the CPU from these initial weights:
    the scale after each step and the final weights."""
    torch = pytest.importorskip("torch")
    tm = torch.nn.Sequential(torch.nn.Linear(13, 17), torch.nn.ReLU(), torch.nn.Linear(17, 5))
    with torch.no_grad():
        for theirs, ours in zip(tm.parameters(), weights):
            theirs.copy_(torch.tensor(ours))
    opt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9, dampening=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=growth_interval)
    scales = []
    for x, y in batches:
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y, dtype=torch.int64))
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(tm.parameters(), 0.5)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, [p.detach().numpy() for p in tm.parameters()]


@pytest.mark.parametrize("inf_at", [None, 0, 3])
def test_a_replayed_grad_scaler_step_skips_overflows_backs_off_and_grows_as_torch(inf_at):
    """unscale_, clip_grad_norm_, step and update replayed with zero_grad(set_to_none=False):
    an inf in one batch (on the first step the momentum buffer is made on a skipped step; the
    fourth is replayed) skips that update exactly and halves the scale; two clean steps double
    it (growth_interval=2). Same losses, scales and weights as the eager run bit for bit, and
    as torch's to 1e-5."""
    batches = _batches(n=9)
    if inf_at is not None:
        batches[inf_at][0][2, 5] = np.inf
    make = _scaler_step(full=True, growth_interval=2)
    eager_model, eager_step, _ = make()
    model, step, _ = make()
    initial = [p.numpy().copy() for p in model.parameters()]
    compiled = ag.compile(step)
    (eager_scaler, _), (scaler, _) = make.scalers
    eager_scales, scales = [], []
    for i, (x, y) in enumerate(batches):
        want = eager_step(ag.tensor(x), ag.tensor(y)).numpy()
        before = [p.numpy().copy() for p in model.parameters()]
        np.testing.assert_array_equal(compiled(ag.tensor(x), ag.tensor(y)).numpy(), want)
        eager_scales.append(eager_scaler.get_scale())   # reads outside the step
        scales.append(scaler.get_scale())
        if i == inf_at:   # skipped: every weight as it was, bit for bit
            for b, p in zip(before, model.parameters()):
                np.testing.assert_array_equal(p.numpy(), b)
    assert compiled.reason() is None and compiled.stats["replayed"] >= 6, compiled.stats
    for p_eager, p in zip(eager_model.parameters(), model.parameters()):
        np.testing.assert_array_equal(p.numpy(), p_eager.numpy())
    torch_scales, torch_weights = _torch_scaler_run(initial, batches, growth_interval=2)
    assert scales == eager_scales == torch_scales
    if inf_at is not None:
        assert scales[inf_at] == (scales[inf_at - 1] if inf_at else 256.0) / 2   # backed off
    assert max(scales) > 256.0   # and grown
    for p, theirs in zip(model.parameters(), torch_weights):
        np.testing.assert_allclose(p.numpy(), theirs, rtol=1e-5, atol=1e-6)


def test_a_nanogpt_style_step():
    rng = np.random.default_rng(3)
    batches = [(rng.integers(0, 11, (3, 8)).astype(np.int32), rng.integers(0, 11, (3, 8)).astype(np.int32))
               for _ in range(STEPS)]

    def make():
        ag.manual_seed(5)
        model = gpt_module(nn, layers=2, width=16, heads=2, block=8, vocab=11)   # nanoGPT's shape, toy size
        opt = ag.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95))

        def step(idx, targets):
            loss = F.cross_entropy(model(idx), targets.view(-1))
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss
        return model, step, lambda: None
    # bit for bit: the token embedding's gradient (a scatter-add) sums in a fixed order
    # (ops/index.py), where float atomics once varied its last bit from run to run
    _assert_same_run(make, lambda s, x, y: s(x, y), batches=batches)


def test_reason_names_the_read_back_and_debug_prints_the_first_difference(monkeypatch, capsys):
    model = _mlp()
    x, y = (ag.tensor(a) for a in _batches(n=1)[0])

    def reads():
        loss = F.cross_entropy(model(x), y)
        return float(loss.item())

    step = ag.compile(reads)
    assert step.reason() == "not called yet"
    step()
    step()
    why = step.reason()
    assert why.startswith("the step reads values back to the host") and "test_compile_shapes.py" in why, why
    assert "loss.item()" in why

    monkeypatch.setenv("ANYGPU_COMPILE_DEBUG", "1")
    calls = [0]

    def changing():
        calls[0] += 1
        return model(x) * float(calls[0])   # a host value in the kernel's parameters, new each call

    step = ag.compile(changing, attempts=2)
    for _ in range(3):
        step()
    err = capsys.readouterr().err
    assert "anygpu.compile: " in err and "gets other parameters" in err and "parameter word" in err, err
    assert "two calls recorded different commands" in step.reason() and "gave up after 2" in step.reason()
    assert step.stats["replayed"] == 0


def test_no_replay_while_the_autotuner_is_choosing(monkeypatch):
    counter = [0]
    monkeypatch.setattr(tuner, "provisional_calls", lambda: counter[0])
    model = _mlp()
    x, y = (ag.tensor(a) for a in _batches(n=1)[0])

    def step():
        counter[0] += tuning[0]  # a kernel chose provisionally during this call
        return F.cross_entropy(model(x), y)
    tuning = [1]
    compiled = ag.compile(step, attempts=2)
    for _ in range(5):   # more calls than attempts: not counted against them
        compiled()
    assert "autotuner is still timing" in compiled.reason() and compiled.stats["replayed"] == 0
    tuning[0] = 0
    for _ in range(4):
        compiled()
    assert compiled.reason() is None and compiled.stats["replayed"] == 2


def test_a_fixed_closed_over_tensor_is_read_in_place_and_a_replaced_one_records_again():
    model = _mlp()
    (x0, y0), (x1, _) = _batches(n=2)
    y = ag.tensor(y0)
    holder = {"x": ag.tensor(x0)}

    def step():
        return F.cross_entropy(model(holder["x"]), y)

    def eager(x):
        return float(F.cross_entropy(model(ag.tensor(x)), y).item())

    compiled = ag.compile(step)
    for _ in range(4):
        assert float(compiled().item()) == eager(x0)
    assert compiled.stats["replayed"] == 2 and compiled.reason() is None
    holder["x"].mul_(2.0)  # changed in place: the replay reads it where it is
    assert float(compiled().item()) == eager(2.0 * x0)
    assert compiled.stats["replayed"] == 3
    holder["x"] = ag.tensor(x1)  # another tensor: recorded again, never the old one's values
    assert float(compiled().item()) == eager(x1)
    assert compiled.reason() == "recorded once: replayed from the next call if that one records the same commands"
    for n in range(4):
        holder["x"] = ag.tensor(x1 + n)
        assert float(compiled().item()) == eager(x1 + n)
    assert compiled.stats["replayed"] >= 4 and compiled.reason() is None


def test_tensors_the_step_only_collects_and_a_changing_batch_shape():
    """A growing list of tensors the step names but does not read from the GPU (here: its
    length) is no input, so it does not stop replay; a closed-over batch that changes shape
    records afresh, then replays."""
    model = _mlp()
    history = []
    batch = {}

    def step():
        loss = F.cross_entropy(model(batch["x"]), batch["y"])
        assert len(history) < 100  # Python only: not replayed (as with CUDA graphs)
        return loss

    def eager(x, y):
        return float(F.cross_entropy(model(ag.tensor(x)), ag.tensor(y)).item())

    compiled = ag.compile(step)
    full = _batches(seed=1, n=5)
    part = _batches(seed=2, n=4, rows=4)
    for x, y in full + part + full:
        batch["x"], batch["y"] = ag.tensor(x), ag.tensor(y)
        history.append(compiled())
        assert float(history[-1].item()) == eager(x, y)
    assert compiled.stats["replayed"] >= 6, compiled.stats
    assert compiled.reason() is None


def _gpt_batches(n, inf_at=()):
    """Token batches and a loss factor per step: inf where the step's gradients overflow."""
    rng = np.random.default_rng(7)
    return [(rng.integers(0, 11, (3, 8)).astype(np.int32), rng.integers(0, 11, (3, 8)).astype(np.int32),
             np.float32(np.inf if i in inf_at else 1.0)) for i in range(n)]


def _gpt_groups(params, nn_dims):
    """nanoGPT's configure_optimizers groups: matrices decayed, the rest not."""
    return [{"params": [p for p, d in zip(params, nn_dims) if d >= 2], "weight_decay": 0.1},
            {"params": [p for p, d in zip(params, nn_dims) if d < 2], "weight_decay": 0.0}]


def _gpt_scaler_step(foreach, amsgrad=False):
    """nanoGPT's AMP loop in float32: scale(loss).backward(); unscale_; clip_grad_norm_;
    step; update; zero_grad(set_to_none=True), AdamW in nanoGPT's two groups (fused=True maps
    to the multi-tensor path; foreach=False is one kernel per parameter)."""
    def make():
        ag.manual_seed(5)
        model = gpt_module(nn, layers=2, width=16, heads=2, block=8, vocab=11)
        params = list(model.parameters())
        opt = ag.optim.AdamW(_gpt_groups(params, [p.dim() for p in params]), lr=1e-2, betas=(0.9, 0.95),
                             amsgrad=amsgrad, **({"fused": True} if foreach is None else {"foreach": foreach}))
        scaler = ag.amp.GradScaler(init_scale=256.0, growth_interval=2)

        def step(idx, targets, factor):
            loss = F.cross_entropy(model(idx), targets.view(-1))
            scaler.scale(loss * factor).backward()
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            return loss
        return model, opt, scaler, step
    return make


def _torch_gpt_scaler_run(weights, batches, amsgrad):
    """_gpt_scaler_step in torch on the CPU from these initial weights: scales, weights, step counts."""
    torch = pytest.importorskip("torch")
    tm = gpt_module(torch.nn, layers=2, width=16, heads=2, block=8, vocab=11)
    params = list(tm.parameters())
    with torch.no_grad():
        for theirs, ours in zip(params, weights):
            theirs.copy_(torch.tensor(ours))
    opt = torch.optim.AdamW(_gpt_groups(params, [p.dim() for p in params]), lr=1e-2, betas=(0.9, 0.95),
                            amsgrad=amsgrad)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)
    scales = []
    for idx, targets, factor in batches:
        loss = torch.nn.functional.cross_entropy(tm(torch.tensor(idx, dtype=torch.int64)),
                                                 torch.tensor(targets, dtype=torch.int64).view(-1))
        scaler.scale(loss * float(factor)).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(tm.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        scales.append(scaler.get_scale())
    steps = [float(v["step"]) for _, v in sorted(opt.state_dict()["state"].items())]
    return scales, [p.detach().numpy() for p in params], steps


@pytest.mark.parametrize("foreach, amsgrad", [(None, False), (False, False), (None, True)])
def test_a_replayed_nanogpt_grad_scaler_step_with_adamw(foreach, amsgrad, monkeypatch):
    """Adam keeps its step counts on the GPU under a GradScaler (torch's capturable Adam), so
    the whole AMP step replays: an inf on steps 1 and 5 (5 replayed) skips those updates
    exactly -- weights, moments and step counts as they were -- and backs the scale off; the
    scales and step counts equal the eager run's, losses, weights and moments to the last float32
    bits (under xdist a kernel choice verified mid-run moved the eager run by an ulp), and
    torch's CPU GradScaler + AdamW to 1e-6."""
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "0")   # no kernel changes from tuning during the run
    inf_at = (1, 5)
    batches = _gpt_batches(10, inf_at)
    make = _gpt_scaler_step(foreach, amsgrad)
    eager_model, eager_opt, eager_scaler, eager_step = make()
    model, opt, scaler, step = make()
    initial = [p.numpy().copy() for p in model.parameters()]
    compiled = ag.compile(step)
    scales, eager_scales = [], []

    def snapshot(o, m):
        return [p.numpy().copy() for p in m.parameters()] + [v.numpy().copy() for s in o.state.values()
                                                                for v in s.values() if isinstance(v, ag.Tensor)]
    for i, (idx, targets, factor) in enumerate(batches):
        args = [ag.tensor(idx), ag.tensor(targets), ag.tensor(factor)]
        want = eager_step(*args).numpy()
        before = snapshot(opt, model)
        # to the last bits of float32: a kernel choice verified mid-run (the tuner's float64 check of
        # a cached winner, once per process) may move the eager model's products by an ulp
        np.testing.assert_allclose(compiled(ag.tensor(idx), ag.tensor(targets), ag.tensor(factor)).numpy(), want,
                                   rtol=1e-5, atol=1e-6)
        scales.append(scaler.get_scale())   # reads outside the step
        eager_scales.append(eager_scaler.get_scale())
        after = snapshot(opt, model)
        if i in inf_at:   # skipped: every weight and moment as it was, bit for bit
            assert len(after) == len(before)
            for b, a in zip(before, after):
                np.testing.assert_array_equal(a, b)
        elif i > 1:
            assert any((a != b).any() for a, b in zip(after, before))
    assert compiled.reason() is None and compiled.stats["replayed"] >= 6, (compiled.stats, compiled.reason())
    assert scales == eager_scales
    for a, b in zip(snapshot(opt, model), snapshot(eager_opt, eager_model)):
        if a.shape == (48,):  # the qkv bias and its moments: the keys' third is Adam-scaled rounding
            a, b = np.delete(a, np.s_[16:32]), np.delete(b, np.s_[16:32])   # noise (see below), left out
        np.testing.assert_array_equal(a, b)  # the embedding's scatter-add sums in a fixed order
    steps = [float(v["step"]) for _, v in sorted(opt.state_dict()["state"].items())]
    assert steps == [float(v["step"]) for _, v in sorted(eager_opt.state_dict()["state"].items())]
    assert steps == [float(len(batches) - len(inf_at))] * len(initial)
    torch_scales, torch_weights, torch_steps = _torch_gpt_scaler_run(initial, batches, amsgrad)
    assert scales == torch_scales and steps == torch_steps
    for (name, p), theirs in zip(model.named_parameters(), torch_weights):
        ours = p.numpy().copy()
        if name.endswith("qkv.bias"):
            # The keys' bias has no gradient but rounding noise (softmax ignores a shift of
            # every score), which Adam scales up to +-lr steps: left out, in both.
            ours[16:32] = theirs[16:32]
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-6, err_msg=name)
