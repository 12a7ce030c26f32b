"""Python numbers beyond float32 as operands, torch.where across dtypes and shapes, and
torch.div's rounding_mode: against torch on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import anygpu as ag


def test_a_number_beyond_float32_is_inf_as_in_torch_and_the_device_keeps_working():
    """struct refuses to pack 1e300 as f32; it used to raise at the lazy realization, far from
    the multiplication. Now it rounds to inf as torch does (runtime/params.pack)."""
    x = np.array([1.0, -2.0, 0.0, np.nan], np.float32)
    for op in (lambda t: t * 1e300, lambda t: t + 1e300, lambda t: t - 1e300, lambda t: t / 1e-300,
               lambda t: (t * -1e300).exp()):
        got, want = op(ag.tensor(x)).numpy(), op(torch.tensor(x)).numpy()
        np.testing.assert_array_equal(got, want)
    half = ag.tensor(x).half() * 1e300
    np.testing.assert_array_equal(half.numpy(), (torch.tensor(x).half() * 1e300).numpy())
    np.testing.assert_array_equal((ag.tensor(x) + 1).numpy(), x + 1)  # and the device still computes


def test_a_captured_step_takes_a_huge_scalar_too():
    w = ag.ones(3)

    def step(x):
        return x * w * 1e300
    compiled = ag.compile(step)
    for _ in range(3):
        np.testing.assert_array_equal(compiled(ag.ones(3)).numpy(), np.full(3, np.inf, np.float32))


CASES = [
    ("f64 tensor, huge number", lambda lib: lib.tensor([1.0, 2.0], dtype=lib.float64), lambda lib: 1e300),
    ("huge number, f64 tensor", lambda lib: 1e300, lambda lib: lib.tensor([1.0, 2.0], dtype=lib.float64)),
    ("f16, f16 broadcast", lambda lib: lib.tensor([1.5, 2.5]).half(), lambda lib: lib.tensor([7.0]).half()),
    ("f16 broadcast, f32", lambda lib: lib.tensor([1.5]).half(), lambda lib: lib.tensor([3.0, 4.0])),
    ("f32, f16 broadcast", lambda lib: lib.tensor([1.0, 2.0]), lambda lib: lib.tensor([7.5]).half()),
    ("f64 broadcast, f16", lambda lib: lib.tensor([1.0], dtype=lib.float64), lambda lib: lib.tensor([3.0, 4.0]).half()),
    ("f16, number", lambda lib: lib.tensor([1.5, 2.5]).half(), lambda lib: 3.25),
]


@pytest.mark.parametrize("name, a, b", CASES, ids=[c[0] for c in CASES])
def test_where_promotes_and_broadcasts_as_torch(name, a, b):
    ours = ag.where(ag.tensor([True, False]), a(ag), b(ag))
    theirs = torch.where(torch.tensor([True, False]), a(torch), b(torch))
    assert str(ours.dtype) == str(theirs.dtype), name
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_takes_rounding_mode_as_torch(mode):
    rng = np.random.default_rng(3)
    a = (rng.standard_normal((3, 5)) * 10).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    b[0] = 0.0
    for ours, theirs in ((ag.div(ag.tensor(a), ag.tensor(b), rounding_mode=mode),
                          torch.div(torch.tensor(a), torch.tensor(b), rounding_mode=mode)),
                         (ag.tensor(a).div(2.5, rounding_mode=mode), torch.tensor(a).div(2.5, rounding_mode=mode)),
                         (ag.divide(ag.tensor(a), 3, rounding_mode=mode), torch.divide(torch.tensor(a), 3, rounding_mode=mode))):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)
    ints = [-7, 7, -8, 9]
    ours = ag.div(ag.tensor(ints), 2, rounding_mode=mode)
    theirs = torch.div(torch.tensor(ints), 2, rounding_mode=mode)
    assert str(ours.dtype) == str(theirs.dtype)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    with pytest.raises(ValueError, match="rounding_mode"):
        ag.div(ag.tensor(a), 2, rounding_mode="up")
