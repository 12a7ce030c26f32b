"""Tensor.register_hook against torch on the CPU: hooks see the complete gradient before it
is used or stored, a returned Tensor replaces it, hooks run in order, handles remove them."""

import numpy as np
import pytest
import torch

import anygpu as ag


def pair(rng, *shape):
    data = rng.standard_normal(shape).astype(np.float32)
    return torch.tensor(data, requires_grad=True), ag.tensor(data, requires_grad=True)


def close(ours, theirs):
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=1e-5, atol=1e-6)


def run_both(rng, build, shape=(5, 3)):
    """build(lib, x) -> loss, after registering hooks; returns (torch x, anygpu x)."""
    tx, ax = pair(rng, *shape)
    build(torch, tx).backward()
    build(ag, ax).backward()
    return tx, ax


def test_a_leaf_hook_replaces_what_goes_into_grad(rng):
    def build(lib, x):
        x.register_hook(lambda g: g * 2 + 1)
        return (x * x).sum()
    tx, ax = run_both(rng, build)
    close(ax.grad, tx.grad)


def test_an_intermediate_hook_changes_what_flows_back(rng):
    def build(lib, x):
        y = x * 3
        y.register_hook(lambda g: g.clamp(-0.5, 0.5))
        return (y * y).sum() + y.sum()
    tx, ax = run_both(rng, build, (4, 7))
    close(ax.grad, tx.grad)


def test_hooks_run_in_order_and_observers_see_the_complete_gradient(rng):
    seen = {}

    def observe(name):
        def hook(g):
            seen[name] = g.clone()  # returns None: the gradient stays
        return hook

    def build(lib, x):
        y = x.exp()
        y.register_hook(observe(lib.__name__))
        y.register_hook(lambda g: g + 1)
        y.register_hook(lambda g: g * 2)
        return (y * y).sum() + (y * 4).sum()  # two uses: the hooks see their sum
    tx, ax = run_both(rng, build, (6,))
    close(ax.grad, tx.grad)
    close(seen["anygpu"], seen["torch"])


def test_a_retained_gradient_is_the_hooked_one(rng):
    kept = {}

    def build(lib, x):
        y = x * 2
        y.retain_grad()
        y.register_hook(lambda g: g * 10)
        kept[lib.__name__] = y
        return y.sum()
    tx, ax = run_both(rng, build, (3,))
    close(kept["anygpu"].grad, kept["torch"].grad)
    close(ax.grad, tx.grad)


def test_a_removed_hook_is_not_called(rng):
    calls = []
    _, ax = pair(rng, 4)
    handle = ax.register_hook(lambda g: calls.append(1))
    handle.remove()
    with ax.register_hook(lambda g: g * 0):  # removed when the block ends
        pass
    (ax * 2).sum().backward()
    assert not calls
    np.testing.assert_allclose(ax.grad.numpy(), np.full(4, 2.0, np.float32))


def test_hooks_on_the_parameters_of_an_sgd_step(rng):
    """Gradient clipping by hook, as scripts do, then an optimizer step: torch's parameters."""
    torch.manual_seed(0)
    tlin = torch.nn.Linear(6, 3)
    alin = ag.nn.Linear(6, 3)
    alin.weight = ag.nn.Parameter(ag.tensor(tlin.weight.detach().numpy()))
    alin.bias = ag.nn.Parameter(ag.tensor(tlin.bias.detach().numpy()))
    x = rng.standard_normal((9, 6)).astype(np.float32)
    for lib, lin in ((torch, tlin), (ag, alin)):
        for p in lin.parameters():
            p.register_hook(lambda g: g.clamp(-0.05, 0.05))
        opt = lib.optim.SGD(lin.parameters(), lr=0.5)
        for _ in range(2):
            opt.zero_grad()
            (lin(lib.tensor(x)) ** 2).mean().backward()
            opt.step()
    close(alin.weight, tlin.weight)
    close(alin.bias, tlin.bias)


def test_bad_hooks_raise(rng):
    _, ax = pair(rng, 3)
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        ag.ones(3).register_hook(lambda g: g)
    with pytest.raises(TypeError, match="callable"):
        ax.register_hook(3)
    ax.register_hook(lambda g: ag.ones(4))
    with pytest.raises(RuntimeError, match="shape"):
        (ax * 1.5).sum().backward()
