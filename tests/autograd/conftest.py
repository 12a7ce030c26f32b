"""Helpers for checking the Tape against independent references: torch.autograd in
float64 on the CPU, and central finite differences of the Tape's own loss."""

import pathlib
import sys

import numpy as np
import pytest
import torch

from anygpu.autograd import Tape

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from tensor.helper import close  # noqa: E402  (the one torch-oracle helper)


def tape_loss_and_grads(dev, build, inputs, target):
    """Record `build(tape, *leaf_ids)` on a new Tape, take mse_loss against `target`,
    run backward. Returns (forward output, loss, [gradient of each input])."""
    tape = Tape(dev)
    ids = [tape.leaf(x) for x in inputs]
    out = build(tape, *ids)
    loss = tape.mse_loss(out, tape.leaf(target))
    tape.backward(loss)
    return tape.read(out), tape.read(loss)[0], [tape.read_grad(i) for i in ids]


def torch_loss_and_grads(build, inputs, target):
    """The same in torch, float64: (forward output flattened, loss, gradients flattened)."""
    tensors = [torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs]
    out = build(*tensors).reshape(-1)
    loss = torch.nn.functional.mse_loss(out, torch.tensor(target, dtype=torch.float64))
    loss.backward()
    return (out.detach().numpy(), loss.item(),
            [np.zeros(t.numel()) if t.grad is None else t.grad.numpy().reshape(-1) for t in tensors])


def check_against_torch(dev, rng, tape_build, torch_build, inputs, rtol=1e-4, atol=1e-5):
    """Forward value, loss and every input's gradient of the Tape against torch.autograd.

    inputs: float32 numpy arrays in the shapes torch_build expects (the Tape gets them
    flattened). The loss is mse_loss against a random target, through the Tape's own
    mse_loss and backward."""
    inputs = [np.asarray(x, dtype=np.float32) for x in inputs]
    with torch.no_grad():
        size = torch_build(*[torch.tensor(x, dtype=torch.float64) for x in inputs]).numel()
    target = rng.standard_normal(size).astype(np.float32)
    want_out, want_loss, want_grads = torch_loss_and_grads(torch_build, inputs, target)
    got_out, got_loss, got_grads = tape_loss_and_grads(dev, tape_build, [x.reshape(-1) for x in inputs], target)
    close(got_out, want_out, rtol, atol)
    close(got_loss, want_loss, rtol, atol)
    for index, (got, want) in enumerate(zip(got_grads, want_grads)):
        assert got is not None, f"input {index} got no gradient"
        assert got.shape == want.shape, f"input {index}: gradient has {got.shape}, expected {want.shape}"
        close(got, want, rtol, atol)


def directional_fd(dev, build, inputs, target, rng, eps=1e-2, directions=3):
    """Central finite differences of the Tape's mse_loss along random unit directions.

    Returns [(analytic, numeric)] per direction: analytic = <gradient, v> from one
    backward; numeric = (L(x + eps v) - L(x - eps v)) / (2 eps) in float64 on the host,
    with v spread over every input."""
    _, _, grads = tape_loss_and_grads(dev, build, inputs, target)
    flat_grad = np.concatenate([g.astype(np.float64) for g in grads])
    sizes = [x.size for x in inputs]
    pairs = []
    for _ in range(directions):
        v = rng.standard_normal(flat_grad.size)
        v /= np.linalg.norm(v)
        parts = np.split(v, np.cumsum(sizes)[:-1])
        losses = []
        for sign in (1.0, -1.0):
            moved = [(x.astype(np.float64) + sign * eps * p).astype(np.float32) for x, p in zip(inputs, parts)]
            losses.append(float(tape_loss_and_grads(dev, build, moved, target)[1]))
        pairs.append((float(flat_grad @ v), (losses[0] - losses[1]) / (2 * eps)))
    return pairs


@pytest.fixture
def against_torch(dev, rng):
    """check_against_torch(tape_build, torch_build, inputs, rtol=, atol=) on the test's device and rng."""
    return lambda *args, **kwargs: check_against_torch(dev, rng, *args, **kwargs)


@pytest.fixture
def run_tape(dev):
    """tape_loss_and_grads(build, inputs, target) on the test's device."""
    return lambda *args: tape_loss_and_grads(dev, *args)


@pytest.fixture
def finite_differences(dev, rng):
    """directional_fd(build, inputs, target, eps=, directions=) on the test's device and rng."""
    return lambda build, inputs, target, **kwargs: directional_fd(dev, build, inputs, target, rng, **kwargs)
