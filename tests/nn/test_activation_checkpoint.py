"""torch.utils.checkpoint on anygpu: the gradients of a checkpointed block equal the plain
block's and torch's (parameters inside the block included, also with a plain-data input);
dropout draws the same mask when recomputed; checkpoint_sequential as torch's."""

import numpy as np
import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint

import anygpu as ag
from anygpu.utils.checkpoint import checkpoint, checkpoint_sequential


def models(rng):
    """The same 3-block MLP in torch and anygpu."""
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8), torch.nn.ReLU(),
                            torch.nn.Linear(8, 3))
    a = ag.nn.Sequential(ag.nn.Linear(6, 8), ag.nn.Tanh(), ag.nn.Linear(8, 8), ag.nn.ReLU(), ag.nn.Linear(8, 3))
    for tl, al in zip(t, a):
        if isinstance(tl, torch.nn.Linear):
            al.weight = ag.nn.Parameter(ag.tensor(tl.weight.detach().numpy()))
            al.bias = ag.nn.Parameter(ag.tensor(tl.bias.detach().numpy()))
    return t, a


def grads_close(t_model, a_model):
    for tp, ap in zip(t_model.parameters(), a_model.parameters()):
        np.testing.assert_allclose(ap.grad.numpy(), tp.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("input_grad", [True, False])
def test_checkpointed_block_gradients_match_torch(rng, input_grad):
    t_model, a_model = models(rng)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    tx, ax = torch.tensor(x, requires_grad=input_grad), ag.tensor(x, requires_grad=input_grad)

    def block(lib_model):
        return lambda h: lib_model[3](lib_model[2](lib_model[1](lib_model[0](h))))

    t_out = t_model[4](torch_checkpoint.checkpoint(block(t_model), tx, use_reentrant=False))
    a_out = a_model[4](checkpoint(block(a_model), ax, use_reentrant=False))
    np.testing.assert_allclose(a_out.numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-6)
    (t_out ** 2).sum().backward()
    (a_out ** 2).sum().backward()
    grads_close(t_model, a_model)
    if input_grad:
        np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_dropout_draws_the_same_mask_when_recomputed(rng):
    x = rng.standard_normal((16, 6)).astype(np.float32)
    grads = []
    for use_checkpoint in (False, True):
        ag.manual_seed(3)
        lin = ag.nn.Linear(6, 6)
        drop = ag.nn.Dropout(0.5)
        xt = ag.tensor(x, requires_grad=True)
        ag.manual_seed(11)
        out = checkpoint(lambda h: drop(lin(h)), xt) if use_checkpoint else drop(lin(xt))
        (out * out).sum().backward()
        grads.append((xt.grad.numpy(), lin.weight.grad.numpy()))
    for plain, recomputed in zip(*grads):
        np.testing.assert_array_equal(recomputed, plain)


def test_several_outputs_and_keyword_arguments(rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)

    def pieces(lib):
        return lambda h, scale=1.0: (h.exp() * scale, (h * h).sum(1))

    tx, ax = torch.tensor(x, requires_grad=True), ag.tensor(x, requires_grad=True)
    t1, t2 = torch_checkpoint.checkpoint(pieces(torch), tx, scale=0.5, use_reentrant=False)
    a1, a2 = checkpoint(pieces(ag), ax, scale=0.5)
    (t1.sum() + (t2 * 3).sum()).backward()
    (a1.sum() + (a2 * 3).sum()).backward()
    np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_checkpoint_sequential_matches_torch(rng):
    t_model, a_model = models(rng)
    x = rng.standard_normal((7, 6)).astype(np.float32)
    tx, ax = torch.tensor(x, requires_grad=True), ag.tensor(x, requires_grad=True)
    t_out = torch_checkpoint.checkpoint_sequential(t_model, 2, tx, use_reentrant=False)
    a_out = checkpoint_sequential(a_model, 2, ax)
    np.testing.assert_allclose(a_out.numpy(), t_out.detach().numpy(), rtol=1e-5, atol=1e-6)
    t_out.sum().backward()
    a_out.sum().backward()
    grads_close(t_model, a_model)
    np.testing.assert_allclose(ax.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_under_no_grad_it_just_runs(rng):
    x = ag.tensor(rng.standard_normal((2, 2)).astype(np.float32), requires_grad=True)
    with ag.no_grad():
        out = checkpoint(lambda h: h * 2, x)
    assert not out.requires_grad
    with pytest.raises(TypeError, match="callable"):
        checkpoint(3, x)


def test_whole_backward_hooks_fire_once_for_the_outer_backward(rng):
    """DistributedDataParallel watches every backward (post_backward_hooks, grad_ready_hooks):
    the recomputation's inner backward must not look like one, and the outer one still fires."""
    import importlib

    module = importlib.import_module("anygpu.tensor")  # (anygpu.tensor the attribute is the factory)
    ends, ready = [], []
    module.post_backward_hooks.append(lambda leaves: ends.append(len(leaves)))
    module.grad_ready_hooks.append(lambda leaf: ready.append(leaf))
    try:
        lin = ag.nn.Linear(4, 4)
        x = ag.tensor(rng.standard_normal((3, 4)).astype(np.float32), requires_grad=True)
        checkpoint(lambda h: lin(h).tanh(), x).sum().backward()
    finally:
        module.post_backward_hooks.pop()
        module.grad_ready_hooks.pop()
    assert len(ends) == 1  # the outer backward only
    assert lin.weight.grad is not None and x.grad is not None


def test_a_checkpointed_step_is_captured_and_replays_as_torch_trains(rng):
    """anygpu.compile of a training step with a checkpointed block: the step is captured
    (the recomputation in backward is part of the recording), its replays follow torch's
    SGD step for step on new data."""
    t_model, a_model = models(rng)
    t_opt = torch.optim.SGD(t_model.parameters(), lr=0.1)
    a_opt = ag.optim.SGD(a_model.parameters(), lr=0.1)

    def step(x, y):
        a_opt.zero_grad()
        loss = ((checkpoint(a_model, x, use_reentrant=False) - y) ** 2).mean()
        loss.backward()
        a_opt.step()
        return loss

    compiled = ag.compile(step)
    for _ in range(5):
        x = rng.standard_normal((7, 6)).astype(np.float32)
        y = rng.standard_normal((7, 3)).astype(np.float32)
        loss = compiled(ag.tensor(x), ag.tensor(y))
        t_opt.zero_grad()
        t_loss = ((t_model(torch.tensor(x)) - torch.tensor(y)) ** 2).mean()
        t_loss.backward()
        t_opt.step()
        np.testing.assert_allclose(loss.item(), t_loss.item(), rtol=1e-5)
    assert compiled.stats["replayed"] >= 2
    for tp, ap in zip(t_model.parameters(), a_model.parameters()):
        np.testing.assert_allclose(ap.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
