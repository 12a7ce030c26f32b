"""torch.use_deterministic_algorithms and its kin (tensor/determinism.py) against torch on the
CPU: the switch and its getters, the debug mode, bad arguments, and the NaN / largest-value
fill of empty, empty_like and new_empty while it is on."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import anygpu as ag
from anygpu.ops import determinism


@pytest.fixture(autouse=True)
def restore():
    """Both libraries' switches back to their defaults after each test."""
    yield
    for lib in (ag, torch):
        lib.use_deterministic_algorithms(False)
        lib.utils.deterministic.fill_uninitialized_memory = True


def state(lib):
    return (lib.are_deterministic_algorithms_enabled(), lib.is_deterministic_algorithms_warn_only_enabled(),
            lib.get_deterministic_debug_mode())


@pytest.mark.parametrize("calls", [
    [("use", True, False)], [("use", True, True)], [("use", True, True), ("use", False, True)],
    [("use", False, True)], [("debug", "warn")], [("debug", "error")], [("debug", 1), ("debug", "default")],
    [("debug", 2)], [("use", True, True), ("debug", 0)],
])
def test_the_switch_and_its_getters_follow_torch(calls):
    assert state(ag) == state(torch) == (False, False, 0)
    for lib in (ag, torch):
        for call in calls:
            if call[0] == "use":
                lib.use_deterministic_algorithms(call[1], warn_only=call[2])
            else:
                lib.set_deterministic_debug_mode(call[1])
    assert state(ag) == state(torch)


@pytest.mark.parametrize("call, error", [
    (lambda lib: lib.use_deterministic_algorithms("yes"), TypeError),
    (lambda lib: lib.use_deterministic_algorithms(1), TypeError),
    (lambda lib: lib.use_deterministic_algorithms(True, warn_only=1), TypeError),
    (lambda lib: lib.set_deterministic_debug_mode("sometimes"), RuntimeError),
    (lambda lib: lib.set_deterministic_debug_mode(3), RuntimeError),
    (lambda lib: lib.set_deterministic_debug_mode(-1), RuntimeError),
])
def test_bad_arguments_raise_as_torch_does(call, error):
    for lib in (torch, ag):
        with pytest.raises(error):
            call(lib)
    assert state(ag) == state(torch) == (False, False, 0)  # a refused call changes nothing


DTYPES = ["float32", "float16", "float64", "int32", "int64", "bool"]  # (no bfloat16 storage in anygpu)


def fills(lib, name):
    dtype = getattr(lib, name)
    base = lib.zeros(2, 3, dtype=dtype)
    return [lib.empty(2, 3, dtype=dtype), lib.empty((4,), dtype=dtype), lib.empty_like(base),
            base.new_empty((3, 2)), lib.empty(0, dtype=dtype)]


def as_numpy(t):
    return t.numpy()


@pytest.mark.parametrize("name", DTYPES)
def test_empty_is_filled_as_torch_fills_it_while_the_mode_is_on(name):
    off = fills(ag, name)
    assert all(not np.any(as_numpy(t)) for t in off)  # zeros: anygpu never hands out stale memory
    ag.use_deterministic_algorithms(True)
    torch.use_deterministic_algorithms(True)
    ours, theirs = fills(ag, name), fills(torch, name)
    for got, want in zip(ours, theirs):
        assert tuple(got.shape) == tuple(want.shape) and str(got.dtype) == str(want.dtype)
        got, want = as_numpy(got), as_numpy(want)
        if name == "int64":  # anygpu keeps int64 in 32 bits: its largest value, not 2**63 - 1
            assert np.all(got == 2**31 - 1) and np.all(want == 2**63 - 1)
        else:
            np.testing.assert_array_equal(got, want)  # NaN matches NaN here
    # fill_uninitialized_memory off: zeros again, as torch gives (its memory is merely not filled)
    ag.utils.deterministic.fill_uninitialized_memory = False
    assert ag.are_deterministic_algorithms_enabled()
    assert all(not np.any(as_numpy(t)) for t in fills(ag, name))


def test_fill_uninitialized_memory_is_a_checked_bool_attribute():
    assert ag.utils.deterministic.fill_uninitialized_memory is True
    with pytest.raises(TypeError, match="expected a bool"):
        ag.utils.deterministic.fill_uninitialized_memory = 1
    ag.utils.deterministic.fill_uninitialized_memory = False
    assert ag.utils.deterministic.fill_uninitialized_memory is False


def test_an_op_without_a_deterministic_form_raises_or_warns():
    determinism.alert_not_deterministic("some_op")  # mode off: nothing
    ag.use_deterministic_algorithms(True)
    with pytest.raises(RuntimeError, match="some_op does not have a deterministic implementation"):
        determinism.alert_not_deterministic("some_op")
    ag.use_deterministic_algorithms(True, warn_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        determinism.alert_not_deterministic("some_op")
    assert [str(w.message) for w in caught] == [
        "some_op does not have a deterministic implementation, but you set 'use_deterministic_algorithms(True)'"]


@pytest.mark.parametrize("n, size", [(7, 5), (5000, 37), (300, 1000), (1, 1)])
def test_repeated_positions_keep_the_last_value_under_the_mode(n, size):
    """x[index] = values and scatter with repeated positions: torch's deterministic mode (and
    its CPU loop) leaves the last value of each position; anygpu's does too (ops/intmath
    index_put sorts the positions), the same bits on every run. Out-of-range positions never
    reach the kernel (refused first, as torch refuses them)."""
    rng = np.random.default_rng(n)
    index = rng.integers(-size, size, n)
    values = rng.standard_normal(n).astype(np.float32)
    ag.use_deterministic_algorithms(True)
    torch.use_deterministic_algorithms(True)
    want = torch.zeros(size)
    want[torch.tensor(index)] = torch.tensor(values)
    runs = []
    for _ in range(3):
        got = ag.zeros(size)
        got[ag.tensor(index)] = ag.tensor(values)
        runs.append(got.numpy())
    for run in runs:
        np.testing.assert_array_equal(run, want.numpy())
    # rows: x[index] = rows of a matrix, and torch.scatter along dim 0
    rows = rng.standard_normal((n, 3)).astype(np.float32)
    want = torch.zeros(size, 3)
    want[torch.tensor(index)] = torch.tensor(rows)
    got = ag.zeros(size, 3)
    got[ag.tensor(index)] = ag.tensor(rows)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    positive = index % size
    idx2 = np.stack([positive, (positive * 7) % size], axis=1)[:, :1].repeat(3, axis=1)
    want = torch.zeros(size, 3).scatter(0, torch.tensor(idx2), torch.tensor(rows))
    got = ag.zeros(size, 3).scatter(0, ag.tensor(idx2), ag.tensor(rows))
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_without_the_mode_a_repeated_position_gets_one_of_its_values():
    index = np.array([2, 2, 2, 0])
    values = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    got = ag.zeros(3)
    got[ag.tensor(index)] = ag.tensor(values)
    assert got.numpy()[2] in (1.0, 2.0, 3.0) and got.numpy()[0] == 4.0 and got.numpy()[1] == 0.0
