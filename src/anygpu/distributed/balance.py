"""Splitting a global batch across ranks of different speed.

A rank that processes a sample in s seconds gets a share of the batch proportional to
1/s, so that every rank finishes its part of a step at about the same time. The gradient
average is then weighted by samples (DistributedDataParallel(weight_by_samples=True)),
which keeps the update that of one process over the whole global batch.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["split_batch"]


def split_batch(total: int, speeds: Sequence[float] | None = None, world_size: int | None = None) -> list[int]:
    """Split `total` samples into one whole count per rank, in proportion to `speeds`
    (samples per second; equal when None), every rank getting at least one.

    Largest remainders round the shares, ties going to the lower rank, so every rank
    computes the same split from the same numbers. Needs total >= number of ranks.
    """
    if speeds is None:
        if world_size is None or world_size < 1:
            raise ValueError(f"split_batch: expected speeds or a positive world_size, got {world_size}")
        speeds = [1.0] * world_size
    weights = np.asarray(speeds, dtype=np.float64)
    ranks = weights.size
    if ranks < 1 or not np.all(np.isfinite(weights)) or np.any(weights <= 0):
        raise ValueError(f"split_batch: speeds must be positive finite numbers, got {list(speeds)}")
    total = int(total)
    if total < ranks:
        raise ValueError(f"split_batch: {total} samples cannot give each of {ranks} ranks at least one")
    # One sample each first, the rest in proportion.
    rest = total - ranks
    exact = rest * weights / weights.sum()
    counts = np.floor(exact).astype(np.int64)
    remainder = exact - counts
    order = sorted(range(ranks), key=lambda r: (-remainder[r], r))
    for r in order[: rest - int(counts.sum())]:
        counts[r] += 1
    return [int(c) + 1 for c in counts]
