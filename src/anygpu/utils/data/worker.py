"""DataLoader worker processes: each loads whole batches from its own copy of the dataset.

The main process runs the sampler and hands each worker lists of indices (map-style
datasets) or "next batch" requests (iterable datasets); a worker answers with the
collated batch, pickled. No GPU buffer crosses a process boundary: the dataset travels
to the workers with its tensors as NumPy arrays (they become tensors again there, on the
worker's own device), and a worker's batch travels back as NumPy arrays that become
tensors in the main process (`collate.HostArray`; a tensor a custom collate_fn returns is
read back and sent the same way). Workers start as fresh interpreters ("forkserver": forked
from a clean server process that imported anygpu once; "spawn" where there is none) unless
the loader names another method: a child forked from a process that holds a GPU device
cannot open one of its own, so anygpu refuses GPU work in a forked worker with a clear error.

Seeding as torch's: worker `i` of an epoch gets seed `base_seed + i` (base_seed drawn in
the main process from the loader's generator, or from the global stream); `random`,
`anygpu.manual_seed` and NumPy's legacy global stream are seeded from it before
`worker_init_fn(i)` runs.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import queue
import random
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["WorkerInfo", "get_worker_info"]

_POLL_S = 1.0  # how often a waiting worker checks that its parent still lives


@dataclass(frozen=True)
class WorkerInfo:
    """What `get_worker_info()` returns inside a worker: its id, the worker count, its seed and
    its own copy of the dataset."""

    id: int
    num_workers: int
    seed: int
    dataset: Any


_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker process, that worker's WorkerInfo; None in the main process."""
    return _info


# -------------------------------------------------------------------- pickling


class _HostPickler(pickle.Pickler):
    """A pickler that sends anygpu Tensors as NumPy arrays (rebuilt as Tensors on unpickling)."""

    def reducer_override(self, obj):
        from ...tensor import Tensor
        from .collate import host_to_tensor
        if isinstance(obj, Tensor):
            return host_to_tensor, (obj.detach().numpy(), obj.dtype.name)
        return NotImplemented


def host_dumps(value) -> bytes:
    """pickle.dumps, with Tensors travelling as host arrays."""
    buffer = io.BytesIO()
    _HostPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    return buffer.getvalue()


# -------------------------------------------------------------------- messages


@dataclass
class WorkerError:
    """An exception raised in a worker: re-raised in the main process, naming the worker."""

    worker_id: int
    kind: Any  # the exception class when it pickles, else None
    kind_name: str
    text: str  # the worker's formatted traceback

    def reraise(self):
        message = (f"Caught {self.kind_name} in DataLoader worker process {self.worker_id}.\n"
                   f"Original Traceback (most recent call last):\n{self.text}")
        error = None
        if isinstance(self.kind, type) and issubclass(self.kind, BaseException):
            try:
                error = self.kind(message)
            except Exception:  # an exception class that needs other arguments
                error = None
        raise (error if error is not None else RuntimeError(message))


class Exhausted:
    """A worker's iterable dataset has no more samples this epoch."""


def _error(worker_id: int, exc: BaseException) -> WorkerError:
    kind: Any = type(exc)
    try:
        pickle.dumps(kind)
    except Exception:
        kind = None
    return WorkerError(worker_id, kind, type(exc).__name__, "".join(traceback.format_exception(exc)))


class _NoGpuInForkedWorker:
    """Stands for the default device in a forked worker: any GPU use raises a clear error
    (a forked child cannot use the device it inherited, nor open another)."""

    def __getattr__(self, name):
        raise RuntimeError("DataLoader worker: this worker was started by fork and cannot use the GPU "
                           "(tensors made in __getitem__ or collate_fn need one); use "
                           "multiprocessing_context='spawn' (anygpu's default) or return NumPy data")


# -------------------------------------------------------------------- the worker


def worker_loop(worker_id: int, num_workers: int, base_seed: int, payload: bytes, index_queue, result_queue,
                parent_pid: int, forked: bool) -> None:
    """The body of worker process `worker_id`: answer tasks until told to stop (None) or the
    parent is gone. A task is (epoch, index, indices); the answer (epoch, index, worker_id, bytes)."""
    global _info
    import anygpu

    from . import collate as collation
    if forked:
        from ... import ops
        ops._default = _NoGpuInForkedWorker()  # type: ignore[assignment]
    seed = base_seed + worker_id
    random.seed(seed)
    anygpu.manual_seed(seed)
    np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))
    setup_error = None
    try:
        dataset, collate_fn, init_fn, auto_collation, batch_size, drop_last = pickle.loads(payload)
        _info = WorkerInfo(worker_id, num_workers, seed, dataset)
        if collate_fn == "collate":
            collate_fn = collation.host_collate
        elif collate_fn == "convert":
            collate_fn = collation.host_convert
        if init_fn is not None:
            init_fn(worker_id)
    except BaseException as exc:  # reported with the first task
        setup_error = _error(worker_id, exc)
    epoch, samples = None, None
    while True:
        try:
            task = index_queue.get(timeout=_POLL_S)
        except queue.Empty:
            if not _parent_alive(parent_pid):
                return
            continue
        if task is None:
            return
        task_epoch, index, indices = task
        if setup_error is not None:
            result: Any = setup_error
        else:
            try:
                if task_epoch != epoch:  # a new epoch: an iterable dataset starts again
                    epoch = task_epoch
                    samples = iter(dataset) if indices is None else None
                if indices is None:
                    result = _next_batch(samples, collate_fn, auto_collation, batch_size, drop_last)
                elif auto_collation:
                    getitems = getattr(dataset, "__getitems__", None)
                    batch = getitems(indices) if getitems is not None else [dataset[i] for i in indices]
                    result = collate_fn(batch)
                else:
                    result = collate_fn(dataset[indices])
            except BaseException as exc:
                result = _error(worker_id, exc)
        try:
            data = host_dumps(result)
        except BaseException as exc:
            data = host_dumps(_error(worker_id, exc))
        result_queue.put((task_epoch, index, worker_id, data))


def _parent_alive(parent_pid: int) -> bool:
    """Whether the process that owns this worker still runs (a forkserver's children have
    the server as their OS parent, so the pid alone is not the test)."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        return parent.is_alive()
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _next_batch(samples, collate_fn, auto_collation: bool, batch_size, drop_last: bool):
    if not auto_collation:
        try:
            return collate_fn(next(samples))
        except StopIteration:
            return Exhausted()
    batch = []
    for sample in samples:
        batch.append(sample)
        if len(batch) == batch_size:
            return collate_fn(batch)
    if batch and not drop_last:
        return collate_fn(batch)
    return Exhausted()
