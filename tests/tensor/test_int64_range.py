"""int64 past 32 bits (issue 26 item 2): anygpu keeps int64 in i32, so a value that would not
fit raises a ValueError rather than wrapping silently, where torch programs rely on it most:
tensors made from data, sums and running sums. Sums that fit are exact, however large their
partial sums (i32 addition is exact modulo 2**32)."""

import numpy as np
import pytest
import torch

import anygpu as ag


def test_sums_that_fit_are_exact_whatever_their_terms():
    values = np.array([2**30, 2**30, -2**30, 2**30 - 1, -2**30, 7], np.int64)  # partial sums pass 2**31
    for dim in (None, 0):
        ours = ag.tensor(values).sum() if dim is None else ag.tensor(values).sum(dim)
        assert ours.item() == torch.tensor(values).sum().item() == int(values.sum())
    running = np.array([2**30, -2**30, 2**30 - 1, 2**30, -2**30, 7], np.int64)  # |terms| sum past 2**31
    np.testing.assert_array_equal(ag.tensor(running).cumsum(0).numpy(), np.cumsum(running))
    rows = np.array([[2**31 - 1, 0], [-2**31, 5]], np.int64)
    np.testing.assert_array_equal(ag.tensor(rows).sum(1).numpy(), rows.sum(1))
    assert ag.tensor(rows).sum(0).dtype == ag.int64


@pytest.mark.parametrize("make", [
    lambda: ag.tensor([2**30, 2**30, 2**30]).sum(),
    lambda: ag.tensor([[2**30, 2**30], [1, 2]]).sum(1),
    lambda: ag.tensor([-2**31, -1]).sum(),
    lambda: ag.tensor([2**30, 2**30, -2**30]).cumsum(0),
    lambda: ag.tensor(np.full(70000, 40000, np.int32)).sum(),
    lambda: ag.tensor(np.full((3, 300), 2**23, np.int64)).cumsum(1),
])
def test_sums_beyond_32_bits_raise(make):
    with pytest.raises(ValueError, match=r"integer sum reaches -?\d+, beyond the 32 bits"):
        make()


def test_values_beyond_32_bits_raise_where_they_enter():
    with pytest.raises(ValueError, match="int32 range"):
        ag.tensor([2**40])
    with pytest.raises(ValueError, match="int32 range"):
        ag.tensor(np.array([-2**31 - 1], np.int64))
    with pytest.raises(ValueError, match="int32 range"):
        ag.arange(2**31 - 2, 2**31 + 2)


def test_bool_counts_and_float_sums_are_untouched():
    mask = ag.tensor(np.ones(100_000, bool))
    assert mask.sum().item() == 100_000 and mask.cumsum(0)[-1].item() == 100_000
    big = ag.tensor(np.full(4, 2.0**30, np.float32))
    assert big.sum().item() == 2.0**32
