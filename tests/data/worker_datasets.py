"""Datasets for the DataLoader worker tests, at module level so worker processes can import
them (spawn) — and without torch, so a worker starts quickly."""

import os
import random
import time

import numpy as np

import anygpu as ag
from anygpu.utils.data import Dataset, IterableDataset, get_worker_info


class Numbered(Dataset):
    """Sample i: (i as float32 row, i, the worker's id, the worker's pid, draws from the worker's
    seeded random streams)."""

    def __init__(self, n: int, fail_at: int | None = None):
        self.n, self.fail_at = n, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError(f"sample {i} is broken")
        info = get_worker_info()
        return (np.full(3, i, np.float32), i, -1 if info is None else info.id, os.getpid(),
                random.random(), float(np.random.rand()))


class MadeOnDevice(Dataset):
    """Samples that are anygpu tensors made in __getitem__ (as minGPT's and makemore's datasets
    do), from anygpu tensors the dataset holds."""

    def __init__(self, data):
        self.data = data  # an anygpu tensor: travels to the workers as a host array

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, i):
        row = self.data[i]
        return row * 2, ag.tensor(i, dtype=ag.long)


class Shards(IterableDataset):
    """range(n) split between workers with get_worker_info, as torch's documentation does."""

    def __init__(self, n: int):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


def record_pid(worker_id: int) -> None:
    """A worker_init_fn: leaves the worker's id and pid where __getitem__ can see them."""
    info = get_worker_info()
    assert info is not None and info.id == worker_id
    info.dataset.init_pid = os.getpid()


class InitSeen(Numbered):
    init_pid = None

    def __getitem__(self, i):
        return self.init_pid, os.getpid()


def failing_init(worker_id: int) -> None:
    raise ValueError(f"init of worker {worker_id} failed")


class Lengthy(Dataset):
    """len() 1e10: for samplers that must not materialise their indices."""

    def __len__(self):
        return 10**10

    def __getitem__(self, i):
        return i


class Slow(Dataset):
    """Sample i after `delay` seconds; sample `die_at` ends its worker process abruptly."""

    def __init__(self, n: int, delay: float = 0.0, die_at: int | None = None):
        self.n, self.delay, self.die_at = n, delay, die_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.die_at:
            os._exit(3)
        time.sleep(self.delay * (1 + (i % 2)))
        return i
