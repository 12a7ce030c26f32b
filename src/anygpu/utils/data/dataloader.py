"""DataLoader: iterate a dataset in batches, with torch's arguments and checks.

Batches are loaded in the main process: `num_workers`, `pin_memory`, `prefetch_factor`,
`persistent_workers`, `timeout` and `worker_init_fn` are accepted (so scripts run
unchanged) and change nothing; `get_worker_info()` is None, as in torch's main process.
A TensorDataset (or a Subset of one) batched with the default collate gathers each batch
with one indexed read per tensor instead of one read per sample; the values are the same.
"""

from __future__ import annotations

import numpy as np

from ... import generator as streams
from .collate import default_collate, default_convert
from .dataset import IterableDataset, Subset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler

__all__ = ["DataLoader", "get_worker_info"]


def get_worker_info():
    """None: anygpu loads every batch in the main process."""
    return None


def _rows_source(dataset):
    """(tensors, index map) when a batch of `dataset` can be read as whole rows of tensors."""
    index_map = None
    while isinstance(dataset, Subset):
        indices = dataset.indices
        index_map = indices if index_map is None else [indices[i] for i in index_map]
        dataset = dataset.dataset
    if type(dataset) is TensorDataset:
        return dataset.tensors, index_map
    return None


class _LoaderIter:
    """The iterator `iter(loader)` returns: `next()` gives a batch; `len()` the batch count."""

    def __init__(self, loader: "DataLoader"):
        if loader.generator is not None:
            # torch's iterator takes a base seed (for workers) from the generator every epoch;
            # drawing it too keeps the sampler's orders equal to torch's, epoch after epoch.
            streams.seed_from(loader.generator, "DataLoader")
        self._length = None
        try:
            self._length = len(loader)
        except TypeError:  # an iterable dataset without __len__
            pass
        self._batches = loader._generate()

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._batches)

    def __len__(self) -> int:
        if self._length is None:
            raise TypeError("DataLoader iterator: the dataset has no length")
        return self._length


class DataLoader:
    """torch.utils.data.DataLoader: batches of `dataset` (see the module docstring).

    `shuffle=True` draws a new order every epoch from `generator` (or from the global
    stream that `anygpu.manual_seed` seeds); `sampler` / `batch_sampler` give the order
    yourself; `drop_last` drops a last, short batch; `batch_size=None` turns batching off."""

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True):
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers option should be a non-negative integer, got {num_workers!r}")
        if timeout < 0:
            raise ValueError(f"DataLoader: timeout option should be non-negative, got {timeout!r}")
        if isinstance(dataset, IterableDataset):
            if shuffle not in (None, False):
                raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle option, "
                                 f"but got shuffle={shuffle}")
            if sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader with IterableDataset: expected unspecified sampler and "
                                 "batch_sampler options")
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("DataLoader: batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("DataLoader: batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if not isinstance(dataset, IterableDataset):
            if sampler is None:
                sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
            if batch_size is not None and batch_sampler is None:
                batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        elif batch_size is not None:
            BatchSampler([], batch_size, drop_last)  # the same argument checks as a map-style dataset gets

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers
        self.pin_memory_device = pin_memory_device
        self.in_order = in_order
        self._auto_collation = batch_sampler is not None or (isinstance(dataset, IterableDataset)
                                                             and batch_size is not None)
        self._default_collate = collate_fn is None
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn

    def __iter__(self) -> _LoaderIter:
        return _LoaderIter(self)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            length = len(self.dataset)
            if self.batch_size is None:
                return length
            return length // self.batch_size if self.drop_last else -(-length // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)

    # ------------------------------------------------------------------ loading

    def _generate(self):
        if isinstance(self.dataset, IterableDataset):
            yield from self._generate_iterable()
            return
        if self.batch_sampler is None:
            for index in self.sampler:
                yield self.collate_fn(self.dataset[index])
            return
        rows = _rows_source(self.dataset) if self._default_collate else None
        for indices in self.batch_sampler:
            yield self._fetch(list(indices), rows)

    def _generate_iterable(self):
        if self.batch_size is None:
            for sample in self.dataset:
                yield self.collate_fn(sample)
            return
        batch = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def _fetch(self, indices: list, rows):
        if rows is not None:
            tensors, index_map = rows
            if index_map is not None:
                indices = [index_map[i] for i in indices]
            return self._gather_rows(tensors, indices)
        getitems = getattr(self.dataset, "__getitems__", None)
        samples = getitems(indices) if getitems is not None else [self.dataset[i] for i in indices]
        return self.collate_fn(samples)

    @staticmethod
    def _gather_rows(tensors, indices: list):
        """default_collate([(t[i] for t in tensors) for i in indices]), one indexed read per tensor."""
        from ...tensor import int64, tensor
        count = tensors[0].shape[0]
        for i in indices:  # the per-sample path raises IndexError for these too
            if not -count <= int(i) < count:
                raise IndexError(f"DataLoader: index {i} is out of range for a TensorDataset of {count} samples")
        picks = tensor(np.asarray(indices, dtype=np.int64) % count, dtype=int64)
        return [t.index_select(0, picks) for t in tensors]
