"""torch.Generator: a seedable random stream for samplers, random_split and the random factories.

A Generator is a Mersenne Twister (MT19937) seeded as torch seeds its CPU generator
(`init_genrand` with the seed's low 32 bits), driven through NumPy (`numpy_rng`). The
permutations and integer draws that samplers make (`randperm`, `randint_below`) use the
raw 32-bit outputs the way torch's CPU kernels do (Fisher-Yates with `draw % (n - i)`;
`draw % n`), so a DataLoader shuffled by `Generator().manual_seed(s)`, a `random_split`
and a `SubsetRandomSampler` with such a generator visit the same indices as torch's.
Floats drawn from a Generator (rand, randn) differ from torch's.
"""

from __future__ import annotations

import numpy as np

from . import placement

__all__ = ["Generator", "default_generator", "randperm", "randint_below", "seed_from"]

_MT_WORDS = 624
_STATE_WORDS = 2 * _MT_WORDS + 1  # the key as 16-bit halves, then the position


def _fresh_seed() -> int:
    """A non-deterministic 63-bit seed (what torch's Generator.seed() draws)."""
    return int(np.random.SeedSequence().entropy) % (2**63)


def _mersenne_twister(seed: int) -> np.random.MT19937:
    """MT19937 in the state the reference `init_genrand(seed)` leaves (what torch uses)."""
    key = np.empty(_MT_WORDS, dtype=np.uint32)
    value = seed & 0xFFFFFFFF
    for i in range(_MT_WORDS):
        key[i] = value
        value = (1812433253 * (value ^ (value >> 30)) + i + 1) & 0xFFFFFFFF
    bit_generator = np.random.MT19937()
    bit_generator.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": _MT_WORDS}}
    return bit_generator


class Generator:
    """torch.Generator(device="cpu"): `manual_seed(s)` (returns the generator), `seed()`,
    `initial_seed()`, `get_state()` / `set_state(t)`. `device` is accepted like torch's and
    reported back; every generator draws on the host, then uploads."""

    def __init__(self, device="cpu"):
        placement.check_device("Generator", device)
        self.device = device if isinstance(device, placement.device) else placement.device(device)
        self.manual_seed(_fresh_seed())

    @property
    def numpy_rng(self) -> np.random.Generator:
        """The NumPy generator that draws this stream (what anygpu's factories use)."""
        return self._numpy_rng

    def _torch_randperm(self, n: int) -> list[int]:
        """randperm(n) from this stream in torch's CPU order (anygpu.randperm calls it)."""
        return randperm(n, self)

    def manual_seed(self, seed) -> "Generator":
        seed = int(seed)
        if seed < 0:  # torch wraps negative seeds into the unsigned 64-bit range
            seed += 2**64
        if not 0 <= seed < 2**64:
            raise ValueError(f"Generator.manual_seed: seed must fit in 64 bits, got {seed}")
        self._initial_seed = seed
        self._numpy_rng = np.random.Generator(_mersenne_twister(seed))
        return self

    def seed(self) -> int:
        """Re-seed from a non-deterministic source; return the new seed."""
        self.manual_seed(_fresh_seed())
        return self._initial_seed

    def initial_seed(self) -> int:
        return self._initial_seed

    def get_state(self):
        """The stream's position as an int64 tensor (the MT19937 key as 16-bit halves, then the
        position): keep it, and `set_state` it to replay the stream from here."""
        from .tensor import int64, tensor
        state = self.numpy_rng.bit_generator.state
        if state.get("bit_generator") != "MT19937":
            raise ValueError(f"Generator.get_state: expected an MT19937 stream, found {state.get('bit_generator')}")
        key = np.asarray(state["state"]["key"], dtype=np.int64)
        words = np.concatenate([key & 0xFFFF, key >> 16, [int(state["state"]["pos"])]])
        return tensor(words, dtype=int64)

    def set_state(self, new_state) -> "Generator":
        words = np.asarray(new_state.numpy() if hasattr(new_state, "numpy") else new_state).reshape(-1)
        if words.size != _STATE_WORDS or words.dtype.kind not in "iu" or words.min() < 0 or words.max() > 0xFFFF \
                or words[-1] > _MT_WORDS:
            raise ValueError(f"Generator.set_state: expected the {_STATE_WORDS} values get_state() returns, "
                             f"got {words.size} values of dtype {words.dtype}")
        words = words.astype(np.uint32)
        key = words[:_MT_WORDS] | (words[_MT_WORDS: 2 * _MT_WORDS] << 16)
        bit_generator = np.random.MT19937()
        bit_generator.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": int(words[-1])}}
        self._numpy_rng = np.random.Generator(bit_generator)
        return self

    def __repr__(self) -> str:
        return f"<anygpu.Generator device={self.device} initial_seed={self._initial_seed}>"


class _DefaultGenerator(Generator):
    """torch.default_generator: the global stream behind `anygpu.manual_seed`, rand, randn, ..."""

    def __init__(self):
        self.device = placement.device("cpu")
        self._initial_seed = None

    @property
    def numpy_rng(self) -> np.random.Generator:
        from .tensor import default_generator as global_stream
        return global_stream()

    def manual_seed(self, seed) -> "Generator":
        from .tensor import manual_seed
        manual_seed(seed)
        self._initial_seed = int(seed)
        return self

    def initial_seed(self) -> int:
        if self._initial_seed is None:
            raise ValueError("default_generator.initial_seed: the global stream was seeded from entropy; "
                             "call anygpu.manual_seed(s) first")
        return self._initial_seed

    def get_state(self):
        raise ValueError("default_generator.get_state: the global stream is not a Mersenne Twister; "
                         "use a Generator() of your own to save and restore a stream")

    def set_state(self, new_state) -> "Generator":
        raise ValueError("default_generator.set_state: use a Generator() of your own to save and restore a stream")


default_generator = _DefaultGenerator()


def _stream(generator, op: str) -> np.random.Generator:
    """The NumPy stream of `generator`; for None, a new Generator seeded from the global stream
    (as torch's samplers seed a fresh generator from the default one on every pass)."""
    if generator is None:
        return Generator().manual_seed(int(default_generator.numpy_rng.integers(0, 2**63))).numpy_rng
    rng = getattr(generator, "numpy_rng", generator)
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"{op}: generator must be an anygpu.Generator, got {type(generator).__name__}")
    return rng


def _raw_draws(rng: np.random.Generator, count: int) -> np.ndarray | None:
    """`count` raw 32-bit outputs of an MT19937 stream (None for another kind of stream)."""
    if not isinstance(rng.bit_generator, np.random.MT19937):
        return None
    return rng.bit_generator.random_raw(count).astype(np.int64) if count else np.zeros(0, np.int64)


def randperm(n: int, generator=None, op: str = "randperm") -> list[int]:
    """A permutation of range(n) drawn from `generator`: torch's CPU order for the same seed
    (Fisher-Yates, swapping i with i + draw % (n - i))."""
    rng = _stream(generator, op)
    draws = _raw_draws(rng, max(n - 1, 0))
    if draws is None:
        return [int(i) for i in rng.permutation(n)]
    order = list(range(n))
    for i, draw in enumerate((draws % np.arange(n, 1, -1)).tolist()):
        j = i + draw
        order[i], order[j] = order[j], order[i]
    return order


def randint_below(n: int, count: int, generator=None, op: str = "randint") -> list[int]:
    """`count` integers in [0, n) from `generator` (torch's CPU randint: draw % n)."""
    rng = _stream(generator, op)
    draws = _raw_draws(rng, count)
    if draws is None:
        return [int(i) for i in rng.integers(0, n, size=count)]
    return (draws % n).tolist()


def seed_from(generator, op: str = "seed") -> int:
    """A 64-bit seed drawn from `generator` (two raw outputs, as torch's random64), e.g. the
    base seed torch's DataLoader iterator takes from its generator at every epoch."""
    rng = _stream(generator, op)
    draws = _raw_draws(rng, 2)
    if draws is None:
        return int(rng.integers(0, 2**63))
    return int(draws[0]) | (int(draws[1]) << 32)
