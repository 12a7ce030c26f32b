"""Layer 1: reverse-mode autograd. `engine` holds the one reverse walk, `tape` the seed's
flat Tape, `rules` the backward rules of Layer-0 ops (shared with the Tensor of Layer 2)."""

from .engine import Entry, reverse_walk
from .tape import Tape, TensorId

__all__ = ["Entry", "Tape", "TensorId", "reverse_walk"]
