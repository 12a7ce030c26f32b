"""amp.cast_ahead: a float16 autocast region's copies of the float32 weights made in one
multi-tensor dispatch as the region starts (the training loop's 16-mixed forward), with
the values, gradients and cache behaviour of the one-at-a-time conversions autocast makes
at each weight's first use; and the loop's 16-mixed digits step, bit for bit the same with
and without it, in fewer dispatches."""

from __future__ import annotations

import numpy as np
import pytest

import anygpu as ag
from anygpu import amp, nn
from anygpu.ops import gpu


def _needs_f16() -> None:
    if not gpu().supports("f16"):
        pytest.skip("no shader-f16 on this adapter: autocast runs in float32")


def _net():
    """Linear layers of distinct sizes (no two conversions of one length, which fusion could
    merge), one layer the forward never calls and one frozen layer."""
    ag.manual_seed(5)
    net = nn.ModuleDict({"a": nn.Linear(12, 20), "b": nn.Linear(20, 7), "unused": nn.Linear(3, 5),
                         "frozen": nn.Linear(7, 6)})
    for p in net["frozen"].parameters():
        p.requires_grad_(False)
    return net


def _forward(net, x, ahead: bool):
    dev = gpu()
    before = dev.stats["dispatches"]
    with ag.autocast("cuda", dtype=ag.float16):
        if ahead:
            amp.cast_ahead(net.parameters())
        out = net["frozen"](ag.relu(net["b"](ag.relu(net["a"](x)))))
        dev.realize_lazy()
    return out, dev.stats["dispatches"] - before


def _bits(t) -> np.ndarray:
    a = t.detach().numpy()
    return a.view(np.uint16 if a.dtype == np.float16 else np.uint32)


def test_same_values_and_gradients_in_fewer_dispatches():
    _needs_f16()
    x = ag.tensor(np.random.default_rng(0).standard_normal((9, 12)).astype(np.float32))
    results = []
    for ahead in (False, True):
        net = _net()
        out, dispatches = _forward(net, x, ahead)
        assert out.dtype == ag.float16
        (out.float() * 3.0).sum().backward()
        grads = {name: p.grad for name, p in net.named_parameters()}
        results.append((out, dispatches, grads))
    (plain, plain_dispatches, plain_grads), (ahead, ahead_dispatches, ahead_grads) = results
    np.testing.assert_array_equal(_bits(ahead), _bits(plain))
    for name, grad in plain_grads.items():
        if grad is None:   # the unused and the frozen layer's: none, with the copies made ahead too
            assert ahead_grads[name] is None, name
        else:
            assert ahead_grads[name].dtype == ag.float32
            np.testing.assert_array_equal(_bits(ahead_grads[name]), _bits(grad), err_msg=name)
    # one dispatch for the six trainable weights' copies; at first use the conversions pending
    # together at a flush are batched too (ops/fusion._flush), so casting ahead is never more
    assert ahead_dispatches <= plain_dispatches, (plain_dispatches, ahead_dispatches)


def test_copies_are_the_regions_cache_and_follow_its_rules():
    _needs_f16()
    net = _net()
    weight = net["a"].weight
    dev = gpu()
    before = dev.stats["dispatches"]
    amp.cast_ahead(net.parameters())                     # no region: nothing
    with ag.autocast("cuda", dtype=ag.float16, enabled=False):
        amp.cast_ahead(net.parameters())
    with ag.autocast("cuda", dtype=ag.float16, cache_enabled=False):
        amp.cast_ahead(net.parameters())
    dev.realize_lazy()
    assert dev.stats["dispatches"] == before
    x = ag.tensor(np.ones((2, 12), np.float32))
    with ag.autocast("cuda", dtype=ag.float16):
        amp.cast_ahead(net.parameters())
        before = dev.stats["dispatches"]
        amp.cast_ahead(net.parameters())                 # already cached: nothing
        dev.realize_lazy()
        assert dev.stats["dispatches"] == before
        with ag.no_grad():                               # a copy per grad mode, as the cache keeps
            amp.cast_ahead([weight])
            first = net["a"](x)
            assert not first.requires_grad
            weight.add_(1.0)                             # a new version: converted again at its use
            second = net["a"](x)
    with ag.no_grad(), ag.autocast("cuda", dtype=ag.float16):   # the same layer converted at its use
        weight.sub_(1.0)
        want_first = net["a"](x)
    with ag.no_grad(), ag.autocast("cuda", dtype=ag.float16):
        weight.add_(1.0)
        want_second = net["a"](x)
    np.testing.assert_array_equal(_bits(first), _bits(want_first))
    np.testing.assert_array_equal(_bits(second), _bits(want_second))
    assert not np.array_equal(_bits(first), _bits(second))


STEPS = 7
INF_STEP = 3   # a batch whose float16 cast overflows: the step is skipped, the scale backs off


def _digits(steps_ahead: bool, compiled: bool, monkeypatch):
    from anygpu.io.datasets import load_digits
    from anygpu.train import loop
    from anygpu.train.stratagems import build_digits

    if not steps_ahead:
        monkeypatch.setattr(amp, "cast_ahead", lambda tensors: None)
    else:
        monkeypatch.undo()
    train, _ = load_digits(seed=0)
    rng = np.random.default_rng(1)
    batches = [(train.x[p].copy(), train.y[p].copy()) for p in (rng.choice(len(train), 32, replace=False)
                                                                for _ in range(STEPS))]
    batches[INF_STEP][0][0, 0, 2, 2] = 1e6
    ag.manual_seed(3)
    settings = loop.Settings(stratagem="digits", epochs=1, batch_size=32, lr=4e-3, seed=3, out=None,
                             precision="16-mixed")
    task = build_digits(settings)
    scaler = ag.amp.GradScaler("cuda", init_scale=2.0 ** 10, growth_interval=2)
    step = loop._compiled_step(task, scaler, True) if compiled else None
    dev = gpu()
    losses, dispatches = [], 0
    for x, y in batches:
        before = dev.stats["dispatches"]
        if compiled:
            loss = step(*task.inputs(x, y, None))
        else:
            with loop._precision_region(True, task.model):
                loss = task.loss_of(*task.inputs(x, y, None))
            loop._backward_and_step(task, scaler, loss)
        losses.append(np.float32(loss.item()))
        dispatches = dev.stats["dispatches"] - before
    weights = [p.numpy().copy() for p in task.model.parameters()]
    return losses, weights, scaler.get_scale(), dispatches, step


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_the_mixed_digits_step_is_bit_for_bit_the_same(compiled, monkeypatch):
    _needs_f16()
    plain = _digits(False, compiled, monkeypatch)
    ahead = _digits(True, compiled, monkeypatch)
    assert not np.isfinite(plain[0][INF_STEP])
    np.testing.assert_array_equal(np.array(ahead[0]).view(np.uint32), np.array(plain[0]).view(np.uint32))
    for ours, theirs in zip(ahead[1], plain[1]):
        np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    assert ahead[2] == plain[2] == 2.0 ** 11     # grown twice, backed off once
    if compiled:
        assert ahead[4].reason() is None and plain[4].reason() is None
        assert ahead[4].stats["replayed"] == plain[4].stats["replayed"] > 0
    # eight weights converted at their first uses (one dispatch each where no other conversion of
    # their length is pending) against one dispatch for all of them
    assert ahead[3] < plain[3], (ahead[3], plain[3])
