"""torch.Generator: a seedable random stream for samplers, random_split and the random factories.

Backed by NumPy's PCG64 (`numpy_rng`), so the numbers differ from torch's for the same seed;
what carries over is the contract: the same seed gives the same stream, on every adapter.
"""

from __future__ import annotations

import numpy as np

from . import placement

__all__ = ["Generator", "default_generator"]

_STATE_WORDS = 19  # PCG64 state as 16-bit words: state (8), inc (8), has_uint32 (1), uinteger (2)


def _fresh_seed() -> int:
    """A non-deterministic 63-bit seed (what torch's Generator.seed() draws)."""
    return int(np.random.SeedSequence().entropy) % (2**63)


def _split16(value: int, words: int) -> list[int]:
    return [(value >> (16 * i)) & 0xFFFF for i in range(words)]


def _join16(words) -> int:
    return sum(int(w) << (16 * i) for i, w in enumerate(words))


class Generator:
    """torch.Generator(device="cpu"): `manual_seed(s)` (returns the generator), `seed()`,
    `initial_seed()`, `get_state()` / `set_state(t)`. `device` is accepted like torch's and
    reported back; every generator draws on the host, then uploads."""

    def __init__(self, device="cpu"):
        placement.check_device("Generator", device)
        self.device = device if isinstance(device, placement.device) else placement.device(device)
        self._initial_seed = _fresh_seed()
        self._numpy_rng = np.random.default_rng(self._initial_seed)

    @property
    def numpy_rng(self) -> np.random.Generator:
        """The NumPy generator that draws this stream (what anygpu's factories use)."""
        return self._numpy_rng

    def manual_seed(self, seed) -> "Generator":
        seed = int(seed)
        if seed < 0:  # torch wraps negative seeds into the unsigned 64-bit range
            seed += 2**64
        if not 0 <= seed < 2**64:
            raise ValueError(f"Generator.manual_seed: seed must fit in 64 bits, got {seed}")
        self._initial_seed = seed
        self._numpy_rng = np.random.default_rng(seed)
        return self

    def seed(self) -> int:
        """Re-seed from a non-deterministic source; return the new seed."""
        self.manual_seed(_fresh_seed())
        return self._initial_seed

    def initial_seed(self) -> int:
        return self._initial_seed

    def get_state(self):
        """The stream's position as an int64 tensor of 19 16-bit words (save it, `set_state` it)."""
        from .tensor import int64, tensor
        state = self.numpy_rng.bit_generator.state
        if state.get("bit_generator") != "PCG64":
            raise ValueError(f"Generator.get_state: expected a PCG64 stream, found {state.get('bit_generator')}")
        words = (_split16(state["state"]["state"], 8) + _split16(state["state"]["inc"], 8)
                 + [int(state["has_uint32"])] + _split16(state["uinteger"], 2))
        return tensor(np.array(words, dtype=np.int64), dtype=int64)

    def set_state(self, new_state) -> "Generator":
        words = np.asarray(new_state.numpy() if hasattr(new_state, "numpy") else new_state).reshape(-1)
        if words.size != _STATE_WORDS or words.dtype.kind not in "iu" or words.min() < 0 or words.max() > 0xFFFF:
            raise ValueError(f"Generator.set_state: expected {_STATE_WORDS} 16-bit words from get_state(), "
                             f"got {words.size} values of dtype {words.dtype}")
        bit_generator = np.random.PCG64()
        bit_generator.state = {
            "bit_generator": "PCG64",
            "state": {"state": _join16(words[:8]), "inc": _join16(words[8:16])},
            "has_uint32": int(words[16]), "uinteger": _join16(words[17:19]),
        }
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
        from .tensor import default_generator
        return default_generator()

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

    def set_state(self, new_state) -> "Generator":
        from .tensor import _rng
        _rng[0] = Generator().set_state(new_state).numpy_rng
        return self


default_generator = _DefaultGenerator()
