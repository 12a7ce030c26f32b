"""The one torch-oracle helper (in the manner of tinygrad's helper_test_op): `check_op` for
Tensor-level ops, `torch_vjp` for Layer-0 and Tape values (torch.autograd in float64), and
`close`, the one tolerance rule. tests/ops and tests/autograd take theirs from here."""

from __future__ import annotations

import numpy as np
import torch

import anygpu as ag

torch.set_num_threads(1)  # small ops: threads cost more than they save on 2 cores


def _as_numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype == torch.bool:
            value = value.float()
        return value.numpy()
    if isinstance(value, ag.Tensor):
        return value.numpy()
    return np.asarray(value)


def close(actual, expected, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """assert_allclose with float32-sized tolerances; atol scales with the data's magnitude."""
    expected = np.asarray(expected, dtype=np.float64)
    atol = atol * max(1.0, float(np.abs(expected).max(initial=0.0)))
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), expected, rtol=rtol, atol=atol)


def torch_vjp(fn, inputs, grad_out):
    """Run fn on float64 torch copies of `inputs` (numpy arrays, or None passed through) and
    backpropagate grad_out: returns (output, [gradient of each input or None])."""
    tensors = [None if x is None else torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in inputs]
    out = fn(*tensors)
    out.backward(torch.tensor(grad_out, dtype=torch.float64))
    return out.detach().numpy(), [None if t is None else t.grad.numpy() for t in tensors]


def check_op(inputs, torch_fn, ag_fn=None, *, atol: float = 1e-5, rtol: float = 1e-4,
             grad_atol: float | None = None, grad_rtol: float | None = None, low: float = -2.0, high: float = 2.0,
             seed: int = 0, grad: bool = True):
    """Run torch_fn on torch tensors and ag_fn (default: torch_fn, for code both libraries
    accept, like `lambda x, y: x @ y`) on anygpu tensors made from the same inputs, then
    compare the forward's shape and values and, unless grad=False, the gradient of
    (out * w).sum() with a fixed random w for every float input.

    inputs: shapes (tuples; uniform floats in [low, high) from a seeded generator) or
    arrays (float arrays require grad, integer arrays are indices). Returns both outputs."""
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(low, high, size=item).astype(np.float32) if isinstance(item, tuple) else np.asarray(item)
              for item in inputs]
    is_float = [a.dtype.kind == "f" for a in arrays]
    torch_in = [torch.tensor(a, dtype=torch.float32 if f else torch.int64, requires_grad=f and grad)
                for a, f in zip(arrays, is_float)]
    ag_in = [ag.tensor(a.astype(np.float32) if f else a.astype(np.int32), requires_grad=f and grad)
             for a, f in zip(arrays, is_float)]
    torch_out = torch_fn(*torch_in)
    ag_out = (ag_fn or torch_fn)(*ag_in)
    assert isinstance(ag_out, ag.Tensor), f"expected an anygpu Tensor, got {type(ag_out).__name__}"
    expected, actual = _as_numpy(torch_out), _as_numpy(ag_out)
    assert actual.shape == expected.shape, f"forward shape: anygpu {actual.shape} vs torch {expected.shape}"
    np.testing.assert_allclose(actual, expected.astype(actual.dtype), atol=atol, rtol=rtol,
                               err_msg="forward values differ from torch")
    if not grad or not any(is_float) or not torch_out.requires_grad:
        return torch_out, ag_out
    weights = rng.uniform(0.5, 1.5, size=expected.shape).astype(np.float32)
    (torch_out * torch.tensor(weights)).sum().backward()
    (ag_out * ag.tensor(weights)).sum().backward()
    for i, (t, a) in enumerate(zip(torch_in, ag_in)):
        if not t.requires_grad:
            continue
        if t.grad is None:
            assert a.grad is None or np.allclose(a.grad.numpy(), 0), f"input {i}: anygpu has a gradient, torch none"
            continue
        assert a.grad is not None, f"input {i}: torch has a gradient, anygpu none"
        assert a.grad.shape == tuple(t.shape), f"input {i}: grad shape {a.grad.shape} vs torch {tuple(t.shape)}"
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), atol=grad_atol if grad_atol is not None else atol,
                                   rtol=grad_rtol if grad_rtol is not None else rtol,
                                   err_msg=f"gradient of input {i} differs from torch")
    return torch_out, ag_out


class Inputs:
    """Input makers for oracle cases, drawing from one seeded generator (its own per test file)."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def pos(self, *shape):
        """Floats in [0.5, 2): safe for log, sqrt, division, fractional powers."""
        return self.rng.uniform(0.5, 2.0, size=shape).astype(np.float32)

    def ints(self, high, *shape, low=0):
        return self.rng.integers(low, high, size=shape).astype(np.int64)

    def grid(self, *shape):
        """Integer-valued floats in [-2, 2]: exact ties for comparisons and max/min."""
        return self.rng.integers(-2, 3, size=shape).astype(np.float32)

    def distinct(self, *shape):
        """A permutation of well-separated values: no ties for max/min/argmax."""
        return (self.rng.permutation(int(np.prod(shape))).reshape(shape) * 0.37 - 3.0).astype(np.float32)


def torch_pair(rng, *shape):
    """The same random float32 data as a torch tensor and an anygpu tensor, both requiring grad."""
    data = rng.standard_normal(shape).astype(np.float32)
    return torch.tensor(data, requires_grad=True), ag.tensor(data, requires_grad=True)


def check_pair(rng, t_out, a_out, t_inputs, a_inputs, rtol: float = 1e-5) -> None:
    """a_out against t_out, then the gradients of sum(out * w) for a random w: each of a_inputs
    against its torch twin in t_inputs (for ops and layers written over two libraries)."""
    np.testing.assert_allclose(a_out.numpy(), t_out.detach().numpy(), rtol=rtol, atol=1e-5)
    w = rng.standard_normal(tuple(t_out.shape)).astype(np.float32)
    (t_out * torch.tensor(w)).sum().backward()
    (a_out * ag.tensor(w)).sum().backward()
    for t, a in zip(t_inputs, a_inputs):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=max(rtol, 1e-4), atol=1e-5)
