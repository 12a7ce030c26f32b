"""DataLoader: iterate a dataset in batches, with torch's arguments and checks.

With `num_workers=0` batches are loaded in the main process. With `num_workers > 0` and a
dataset (with collate_fn and worker_init_fn) that pickles, that many worker processes load
whole batches in parallel (see worker.py: fresh interpreters, torch's seeding, batches
returned in the sampler's order, `prefetch_factor` batches in flight per worker,
`persistent_workers` kept from epoch to epoch, a worker's exception re-raised here naming
the worker); a dataset that does not pickle is loaded in the main process with a warning.
A TensorDataset (or a Subset of one) batched with the default collate gathers each batch
with one indexed GPU read per tensor instead of one read per sample, always in the main
process (workers could only add copies); the values are the same. `pin_memory` and
`pin_memory_device` change nothing (batches are uploaded to the GPU when they are made).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import queue
import time
import warnings
import weakref

import numpy as np

from ... import generator as streams
from . import torch_alias
from .collate import default_collate, default_convert
from .dataset import IterableDataset, Subset, TensorDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler
from .worker import Exhausted, WorkerError, get_worker_info, host_dumps, worker_loop

__all__ = ["DataLoader", "get_worker_info"]

_POLL_S = 1.0  # how often the main process checks its workers while waiting for a batch


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
        pool_payload = loader._worker_payload()
        base_seed = None
        if loader.generator is not None or pool_payload is not None:
            # torch's iterator takes a base seed (for workers) from the generator every epoch;
            # drawing it too keeps the sampler's orders equal to torch's, epoch after epoch.
            base_seed = streams.seed_from(loader.generator, "DataLoader")
        self._length = None
        try:
            self._length = len(loader)
        except TypeError:  # an iterable dataset without __len__
            pass
        if pool_payload is None:
            self._batches = loader._generate()
        else:
            self._batches = _WorkerEpoch(loader, pool_payload, base_seed)

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
        if prefetch_factor is not None and num_workers == 0:
            raise ValueError("DataLoader: prefetch_factor option could only be specified in multiprocessing. "
                             "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and (isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int)
                                            or prefetch_factor < 0):
            raise ValueError(f"DataLoader: prefetch_factor option should be a non-negative integer, got "
                             f"{prefetch_factor!r}")
        if persistent_workers and num_workers == 0:
            raise ValueError("DataLoader: persistent_workers option needs num_workers > 0")
        self._payload: bytes | None = None
        self._pool: _WorkerPool | None = None

    def __iter__(self) -> _LoaderIter:
        return _LoaderIter(self)

    def _worker_payload(self) -> bytes | None:
        """What worker processes start from (the pickled dataset, collate_fn, ...), or None to
        load in the main process."""
        if self.num_workers == 0:
            return None
        if self._default_collate and _rows_source(self.dataset) is not None:
            return None  # a TensorDataset's rows are on the GPU already: workers could only add copies
        if self._payload == b"":  # it did not pickle: the main process loads, every epoch
            return None
        if self.persistent_workers and self._pool is not None:
            return self._payload  # the running workers keep their copy, as torch's
        collate = ("collate" if self._auto_collation else "convert") if self._default_collate \
            else self.collate_fn
        try:  # every epoch: new workers see the dataset as it is now, as torch's forked ones do
            self._payload = host_dumps((self.dataset, collate, self.worker_init_fn, self._auto_collation,
                                        self.batch_size, self.drop_last))
        except Exception as exc:  # lambdas, local classes, open files, ...
            warnings.warn(f"DataLoader: the dataset, collate_fn or worker_init_fn cannot be pickled "
                          f"({type(exc).__name__}: {exc}); loading in the main process instead of "
                          f"{self.num_workers} worker processes", stacklevel=3)
            self._payload = b""
            return None
        return self._payload

    def _context(self):
        context = self.multiprocessing_context
        if context is None:
            # A fresh interpreter per worker (no GPU state inherited). forkserver forks the workers
            # from one clean server that has imported anygpu already: faster starts than spawn.
            if "forkserver" not in multiprocessing.get_all_start_methods():
                return multiprocessing.get_context("spawn")
            context = multiprocessing.get_context("forkserver")
            preload = ["anygpu"]
            if torch_alias.torch_is_anygpu():  # the workers' `import torch` must find anygpu too
                os.environ[torch_alias.ENV] = "1"
                preload.append(torch_alias.__name__)
            context.set_forkserver_preload(preload)
            return context
        if isinstance(context, str):
            if context not in multiprocessing.get_all_start_methods():
                raise ValueError(f"DataLoader: multiprocessing_context option should specify a valid start "
                                 f"method in {multiprocessing.get_all_start_methods()!r}, but got "
                                 f"multiprocessing_context={context!r}")
            return multiprocessing.get_context(context)
        return context

    def _shutdown_workers(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __del__(self):
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown()

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_pool"] = None
        return state

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


class _WorkerPool:
    """The worker processes of a loader: one task queue each, one shared result queue."""

    def __init__(self, loader: DataLoader, payload: bytes, base_seed: int):
        context = loader._context()
        forked = context.get_start_method() == "fork"
        self.result_queue = context.Queue()
        self.index_queues = [context.Queue() for _ in range(loader.num_workers)]
        self.workers = []
        for worker_id, index_queue in enumerate(self.index_queues):
            process = context.Process(target=worker_loop, daemon=True,
                                      args=(worker_id, loader.num_workers, base_seed, payload, index_queue,
                                            self.result_queue, os.getpid(), forked))
            process.start()
            self.workers.append(process)
        self.epoch = 0
        self._grace = [5.0]  # seconds the workers get to finish their task and leave
        self._finalizer = weakref.finalize(self, _stop, self.workers, self.index_queues, self.result_queue,
                                           self._grace)

    def shutdown(self, grace: float = 5.0) -> None:
        """Stop the workers: they finish their task and leave, or are terminated after `grace` s."""
        self._grace[0] = grace
        self._finalizer()


def _stop(workers, index_queues, result_queue, grace) -> None:
    for index_queue in index_queues:
        try:
            index_queue.put(None)
        except (OSError, ValueError):  # already closed
            pass
    deadline = time.monotonic() + grace[0]
    for process in workers:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.terminate()
            process.join(1.0)
    for q in (*index_queues, result_queue):
        q.cancel_join_thread()
        q.close()


class _WorkerEpoch:
    """One epoch's batches from the loader's workers, in the sampler's order (in_order=True,
    torch's default) or as they arrive; at most prefetch_factor tasks in flight per worker."""

    def __init__(self, loader: DataLoader, payload: bytes, base_seed: int):
        self._loader = loader
        pool = loader._pool if loader.persistent_workers else None
        if pool is None:
            pool = _WorkerPool(loader, payload, base_seed)
            if loader.persistent_workers:
                loader._pool = pool
        pool.epoch += 1
        self._pool, self._epoch = pool, pool.epoch
        self._own_pool = not loader.persistent_workers
        self._iterable = isinstance(loader.dataset, IterableDataset)
        if self._iterable:
            self._tasks = None
        elif loader.batch_sampler is not None:
            self._tasks = iter(loader.batch_sampler)
        else:
            self._tasks = iter(loader.sampler)
        self._active = [True] * len(pool.workers)
        self._next_worker = 0
        self._sent = 0  # tasks sent (the next task's index)
        self._wanted = 0  # the index of the next batch to return
        self._owner: dict[int, int] = {}  # index of a task in flight -> its worker
        self._arrived: dict[int, object] = {}
        self._done = False
        prefetch = 2 if loader.prefetch_factor is None else loader.prefetch_factor
        for _ in range(max(1, prefetch) * len(pool.workers)):
            if not self._send():
                break

    def _send(self) -> bool:
        """Give the next task to the next active worker; False when there is none."""
        if not any(self._active):
            return False
        if self._iterable:
            indices = None
        else:
            try:
                indices = next(self._tasks)
            except StopIteration:
                return False
            if isinstance(indices, (tuple, range)) or hasattr(indices, "tolist"):
                indices = list(indices.tolist() if hasattr(indices, "tolist") else indices)
        while not self._active[self._next_worker]:
            self._next_worker = (self._next_worker + 1) % len(self._active)
        worker = self._next_worker
        self._next_worker = (worker + 1) % len(self._active)
        self._pool.index_queues[worker].put((self._epoch, self._sent, indices))
        self._owner[self._sent] = worker
        self._sent += 1
        return True

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        while True:
            if self._loader.in_order:
                # Skip tasks of workers whose iterable ran out: they will not be answered.
                while self._wanted in self._owner and self._wanted not in self._arrived \
                        and not self._active[self._owner[self._wanted]]:
                    del self._owner[self._wanted]
                    self._wanted += 1
                if self._wanted in self._arrived:
                    index = self._wanted
                    self._wanted += 1
                    data = self._arrived.pop(index)
                    del self._owner[index]
                    if isinstance(data, Exhausted):
                        self._send()
                        continue
                    return self._deliver(data)
            elif self._arrived:
                index = next(iter(self._arrived))
                data = self._arrived.pop(index)
                del self._owner[index]
                if isinstance(data, Exhausted):
                    self._send()
                    continue
                return self._deliver(data)
            if not self._owner:
                self._finish()
                raise StopIteration
            self._receive()

    def _deliver(self, data):
        """A batch to return (a worker's error is raised in its batch's turn, as torch does)."""
        if isinstance(data, WorkerError):
            self._finish()
            data.reraise()
        self._send()
        return data

    def _receive(self) -> None:
        """Wait for one answer of this epoch and keep it (an error is raised here)."""
        timeout = self._loader.timeout
        started = time.monotonic()
        while True:
            try:
                epoch, index, worker, data = self._pool.result_queue.get(
                    timeout=min(_POLL_S, timeout) if timeout else _POLL_S)
            except queue.Empty:
                dead = [p for p in self._pool.workers if not p.is_alive()]
                if dead:
                    self._finish(failed=True)
                    pids = ", ".join(str(p.pid) for p in dead)
                    raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly "
                                       f"(exit code {dead[0].exitcode})") from None
                if timeout and time.monotonic() - started > timeout:
                    self._finish(failed=True)
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
                continue
            if epoch != self._epoch or index not in self._owner:
                continue  # an answer to an abandoned epoch of persistent workers
            result = pickle.loads(data)  # our own workers' bytes, never a user file
            if isinstance(result, Exhausted):
                self._active[worker] = False
            self._arrived[index] = result
            return

    def _finish(self, failed: bool = False) -> None:
        self._done = True
        if self._own_pool or failed:
            if failed and self._pool is self._loader._pool:
                self._loader._pool = None  # persistent workers that failed are not reused
            self._pool.shutdown(0.0 if failed else 5.0)

    def __del__(self):
        if getattr(self, "_own_pool", False) and not self._done:
            self._pool.shutdown()
