"""The global random stream behind manual_seed, rand, randn, ... and `generator=` arguments."""

from __future__ import annotations


import numpy as np





_seed = [int(np.random.SeedSequence().generate_state(1, np.uint64)[0])]  # initial_seed(): unseeded runs differ

_rng = [np.random.default_rng(_seed[0])]


def manual_seed(seed: int) -> None:
    """Seed the generator behind rand/randn/dropout/initialisation."""
    seed = int(seed)
    _seed[0] = seed
    _rng[0] = np.random.default_rng(seed)


def initial_seed() -> int:
    """The seed of the random stream: the last manual_seed / seed, or the one drawn at start."""
    return _seed[0]


def seed() -> int:
    """Seed the random stream from a non-deterministic source; return that seed (torch.seed)."""
    fresh = int(np.random.SeedSequence().generate_state(1, np.uint64)[0]) >> 1  # a non-negative int64
    manual_seed(fresh)
    return fresh


_STATE_WORDS = 10  # PCG64's 128-bit state and increment, its buffered half-word and flag: 32-bit words


def default_generator() -> np.random.Generator:
    return _rng[0]


def _generator_rng(generator) -> np.random.Generator:
    """The numpy generator behind a `generator=` argument (None: the global one)."""
    if generator is None:
        return _rng[0]
    rng = getattr(generator, "numpy_rng", None) or getattr(generator, "_rng", None)
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(generator, np.random.Generator):
        return generator
    raise ValueError(f"generator: expected an anygpu.Generator, got {type(generator).__name__}")
