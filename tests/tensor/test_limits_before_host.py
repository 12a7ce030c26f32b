"""Limits are checked before any host array is built (issue 13, item 9)."""

import tracemalloc

import numpy as np
import pytest

import anygpu as ag

HUGE = 1 << 31  # elements: 8 GiB of float32, over every adapter's buffer limit


@pytest.mark.parametrize("make", [
    lambda: ag.randn(HUGE), lambda: ag.rand(HUGE), lambda: ag.randn(1 << 16, 1 << 15),
    lambda: ag.randint(0, 10, (HUGE,)), lambda: ag.full((HUGE,), 3), lambda: ag.arange(HUGE),
    lambda: ag.randperm(HUGE), lambda: ag.zeros(HUGE), lambda: ag.ones(HUGE),
])
def test_over_limit_is_refused_without_host_allocation(make):
    ag.gpu()
    tracemalloc.start()
    try:
        with pytest.raises(ag.LimitError, match="bytes requested"):
            make()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes of host memory before refusing"


def test_arange_refuses_zero_and_infinite_steps():
    with pytest.raises(ValueError, match="step"):
        ag.arange(0, 10, 0)
    with pytest.raises(ValueError, match="not finite"):
        ag.arange(0, float("inf"))


def test_small_requests_still_work():
    np.testing.assert_array_equal(ag.arange(5).numpy(), np.arange(5))
    assert ag.randn(3, 4).shape == (3, 4) and ag.randint(0, 3, (7,)).shape == (7,)
    assert ag.full((2,), 7).numpy().tolist() == [7, 7]
