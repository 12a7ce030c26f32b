"""Samplers: which dataset indices a DataLoader visits, in what order and in what batches.

Random samplers draw from a `generator=` (anygpu.Generator) when given: the same indices
as torch's samplers with a torch.Generator of the same seed (see anygpu/generator.py).
Otherwise each pass seeds a fresh generator from the global stream, so
`anygpu.manual_seed(s)` makes shuffles repeatable (those orders differ from torch's).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Generic, TypeVar

import numpy as np

from ... import generator as streams

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler",
           "BatchSampler"]


def _positive_int(op: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{op}: {name} should be a positive integer value, but got {name}={value!r}")
    return int(value)


T_co = TypeVar("T_co", covariant=True)
_CHUNK = 32  # indices a replacement sampler draws at a time (torch's chunk)
_WEIGHTED_CHUNK = 4096  # draws per chunk of a WeightedRandomSampler with replacement


class Sampler(Generic[T_co]):
    """Base class: an iterable of dataset indices (or of index lists, for batch samplers);
    subscriptable in annotations (`Sampler[int]`)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self) -> Iterator:
        raise NotImplementedError(f"{type(self).__name__} must define __iter__")


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random permutation of the indices each pass; with `replacement=True`, `num_samples`
    independent draws. Without replacement and num_samples > len, whole permutations follow
    each other and the last is cut short (torch's rule)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None, generator=None):
        if not isinstance(replacement, bool):
            raise ValueError(f"RandomSampler: replacement should be a boolean value, but got "
                             f"replacement={replacement!r}")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        _positive_int("RandomSampler", "num_samples", self.num_samples)  # an empty dataset too, as torch

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else int(self._num_samples)

    def __iter__(self) -> Iterator[int]:
        n = len(self.data_source)
        # One stream for the whole pass (torch seeds one generator per pass when none is given).
        generator = self.generator if self.generator is not None else \
            streams.Generator().manual_seed(streams.seed_from(None, "RandomSampler"))
        if self.replacement:
            # Lazily, in chunks of 32 as torch draws them: num_samples may be 1e10 (an "infinite"
            # loader) and the generator is left where torch's would be after the same batches.
            full_chunks, rest = divmod(self.num_samples, _CHUNK)
            for _ in range(full_chunks):
                yield from streams.randint_below(n, _CHUNK, generator, "RandomSampler")
            yield from streams.randint_below(n, rest, generator, "RandomSampler")
            return
        for _ in range(self.num_samples // n):
            yield from streams.randperm(n, generator, "RandomSampler")
        yield from streams.randperm(n, generator, "RandomSampler")[: self.num_samples % n]

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order, a new one each pass."""

    def __init__(self, indices: Sequence[int], generator=None):
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        for i in streams.randperm(len(self.indices), self.generator, "SubsetRandomSampler"):
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """`num_samples` indices drawn with probability proportional to `weights`."""

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        self.num_samples = _positive_int("WeightedRandomSampler", "num_samples", num_samples)
        if not isinstance(replacement, bool):
            raise ValueError(f"WeightedRandomSampler: replacement should be a boolean value, but got "
                             f"replacement={replacement!r}")
        values = weights.numpy() if hasattr(weights, "numpy") else weights
        self.weights = np.asarray(values, dtype=np.float64).reshape(-1)
        if self.weights.size == 0 or (self.weights < 0).any() or not np.isfinite(self.weights).all() \
                or self.weights.sum() <= 0:
            raise ValueError(f"WeightedRandomSampler: weights must be finite, non-negative and not all zero, "
                             f"got {self.weights.size} values")
        if not replacement and self.num_samples > np.count_nonzero(self.weights):
            raise ValueError(f"WeightedRandomSampler: {self.num_samples} samples without replacement, but only "
                             f"{np.count_nonzero(self.weights)} weights are non-zero")
        self.replacement = replacement
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        rng = streams._stream(self.generator, "WeightedRandomSampler")
        if not self.replacement:  # num_samples <= len(weights): one draw
            picks = rng.choice(self.weights.size, size=self.num_samples, replace=False,
                               p=self.weights / self.weights.sum())
            yield from picks.tolist()
            return
        # With replacement num_samples may be huge: inverse-CDF draws, a chunk at a time.
        cumulative = np.cumsum(self.weights)
        cumulative /= cumulative[-1]
        last = int(np.flatnonzero(self.weights)[-1])  # rounding must never pick a zero weight
        for start in range(0, self.num_samples, _WEIGHTED_CHUNK):
            count = min(_WEIGHTED_CHUNK, self.num_samples - start)
            picks = np.searchsorted(cumulative, rng.random(count), side="right")
            yield from np.minimum(picks, last).tolist()

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Groups the indices of `sampler` into lists of `batch_size`; the last, shorter one is
    dropped when `drop_last`."""

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool):
        self.batch_size = _positive_int("BatchSampler", "batch_size", batch_size)
        if not isinstance(drop_last, bool):
            raise ValueError(f"BatchSampler: drop_last should be a boolean value, but got drop_last={drop_last!r}")
        self.sampler = sampler
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return -(-len(self.sampler) // self.batch_size)
