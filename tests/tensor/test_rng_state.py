"""torch.seed / initial_seed / get_rng_state / set_rng_state on anygpu's one random stream."""

import numpy as np
import pytest

import anygpu as ag


def draws():
    return np.concatenate([ag.rand(5).numpy(), ag.randn(3).numpy(),
                           ag.nn.functional.dropout(ag.ones(64), 0.5).numpy()])


def test_a_saved_state_replays_the_same_draws(tmp_path):
    ag.manual_seed(123)
    draws()
    state = ag.get_rng_state()
    first = draws()
    ag.save({"rng": state}, tmp_path / "state.pt")  # as training scripts checkpoint it
    draws()
    ag.set_rng_state(ag.load(tmp_path / "state.pt")["rng"])
    np.testing.assert_array_equal(draws(), first)


def test_seeds():
    ag.manual_seed(77)
    assert ag.initial_seed() == 77
    a = ag.seed()
    assert a == ag.initial_seed() and 0 <= a < 2**63
    after_a = draws()
    ag.manual_seed(a)
    np.testing.assert_array_equal(draws(), after_a)
    assert ag.seed() != a  # fresh entropy (a 1 in 2**63 chance to collide)


def test_a_bad_state_is_refused():
    with pytest.raises(ValueError, match="get_rng_state"):
        ag.set_rng_state(ag.zeros(3))
    with pytest.raises(ValueError, match="get_rng_state"):
        ag.set_rng_state([1, 2, 3])
