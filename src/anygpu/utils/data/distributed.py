"""DistributedSampler: each rank of a data-parallel job reads its own shard of a dataset."""

from __future__ import annotations

import math
from typing import Iterator

import numpy as np

from ... import generator as streams
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """torch.utils.data.DistributedSampler's semantics on anygpu.

    Every rank draws the same permutation of range(len(dataset)) (seeded by seed + epoch,
    so call ``set_epoch`` at the start of each epoch) and keeps every num_replicas-th index
    starting at its rank: the shards are disjoint. Without drop_last the list is first
    padded with its own first indices up to a multiple of num_replicas, so every rank gets
    the same count; with drop_last the tail is cut instead.

    num_replicas and rank default to the process group's world size and rank.
    The permutation is torch's for the same seed and epoch (a generator seeded with
    seed + epoch, torch's CPU randperm order: anygpu.generator), so a shuffled data-parallel
    run reads the same samples on the same ranks as under torch.
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        if num_replicas is None or rank is None:
            from anygpu import distributed as dist
            if not dist.is_initialized():
                raise RuntimeError("DistributedSampler: give num_replicas and rank, or call "
                                   "anygpu.distributed.init_process_group() first")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if int(num_replicas) != num_replicas or num_replicas < 1:
            raise ValueError(f"DistributedSampler: num_replicas must be a positive integer, got {num_replicas}")
        if int(rank) != rank or not 0 <= rank < num_replicas:
            raise ValueError(f"DistributedSampler: rank must be in [0, {num_replicas}), got {rank}")
        if int(seed) != seed or seed < 0:
            raise ValueError(f"DistributedSampler: seed must be a non-negative integer, got {seed}")
        self.dataset = dataset
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        n = len(dataset)
        if self.drop_last and n % self.num_replicas:
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self) -> Iterator[int]:
        n = len(self.dataset)
        if self.shuffle:
            generator = streams.Generator().manual_seed(self.seed + self.epoch)
            indices = np.asarray(streams.randperm(n, generator, "DistributedSampler"), dtype=np.int64)
        else:
            indices = np.arange(n)
        if self.drop_last:
            indices = indices[: self.total_size]
        elif self.total_size > n and n:
            indices = np.resize(indices, self.total_size)  # repeats from the start, as torch pads
        return iter(indices[self.rank: self.total_size: self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Use another permutation (seed + epoch) on every rank alike."""
        self.epoch = int(epoch)
