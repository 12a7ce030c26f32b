"""What ``anygpu train`` does differently when an MPI launcher started several ranks.

``mpiexec -n N anygpu train STRATAGEM ...`` needs no other flag: ``start`` sees the world
the launcher announced, joins it (each rank opening the GPU of its local rank) and the loop
then trains data-parallel:

- ``--batch-size`` is per rank, as with torch's DistributedDataParallel: a step takes the
  next N * batch-size samples of the epoch's permutation (the same on every rank) and rank r
  trains on its part. With ``--balance throughput`` the parts follow each rank's measured
  speed; the gradient average is weighted by samples, so the update is that of one process
  on the whole global batch either way.
- Only rank 0 evaluates, writes files and prints; every rank reads the same checkpoint on
  ``--resume`` (rank 0's weights are broadcast anyway).
- Train losses and throughput in metrics.json are global (all ranks' samples).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterator

import numpy as np

from anygpu.io.datasets import batches

__all__ = ["DataParallel", "start"]

# The epoch-end barrier waits for rank 0's evaluation, files and samples, which may take far
# longer than a training step: it gets this many times the process group's timeout.
_EPOCH_END_TIMEOUT_FACTOR = 20
# Gradient bucket size: small enough that the stratagems' models (a few MiB of gradients) make
# several buckets, so reading one back overlaps the all-reduce of the one before
# (ANYGPU_DDP_BUCKET_MB sets another, for measurements: _bucket_mb).
BUCKET_MB = 2.0


def _bucket_mb() -> float:
    text = os.environ.get("ANYGPU_DDP_BUCKET_MB")
    if not text:
        return BUCKET_MB
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"ANYGPU_DDP_BUCKET_MB must be a positive number of MiB, got {text!r}")
    return value


def start(balance: str | None = None) -> "DataParallel | None":
    """Join the MPI world when the launcher started more than one rank; None otherwise.
    Must run before the first tensor exists (it picks this rank's adapter)."""
    from anygpu import distributed as dist

    if dist.launched_by_mpi() <= 1 and not (dist.is_initialized() and dist.get_world_size() > 1):
        if balance is not None:
            raise ValueError("--balance: needs several ranks; start the run with mpiexec -n N anygpu train ...")
        return None
    if not dist.is_initialized():
        try:
            dist.init_process_group("mpi")
        except ImportError as error:  # launched by mpiexec, but mpi4py is missing
            raise dist.DistributedError(str(error)) from None
    return DataParallel(balance)


class DataParallel:
    """One rank's part of a data-parallel run (see the module docstring)."""

    def __init__(self, balance: str | None):
        from anygpu import distributed as dist

        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.balance = balance
        self.ddp = None
        self.adapters: list[str] = []

    @property
    def writes(self) -> bool:
        """Whether this rank writes files and prints (rank 0)."""
        return self.rank == 0

    def attach(self, model, batch_size: int, adapter: str, print_line: Callable[[str], None]) -> None:
        """Wrap the model (after any resume: rank 0's weights are broadcast) and say who trains."""
        from anygpu import distributed as dist
        from anygpu.nn.parallel import DistributedDataParallel

        self.global_batch = batch_size * self.world_size
        self.ddp = DistributedDataParallel(model, weight_by_samples=True, balance=self.balance,
                                           global_batch_size=self.global_batch, bucket_cap_mb=_bucket_mb())
        self.adapters = dist.all_gather_strings(adapter)
        print_line(f"data-parallel on {self.world_size} ranks (MPI): "
                   + ", ".join(f"rank {r} {name}" for r, name in enumerate(self.adapters))
                   + f"; global batch {self.global_batch}"
                   + (" split by measured throughput" if self.balance else ""))

    def steps(self, n_train: int) -> int:
        return -(-n_train // self.global_batch)

    def batches(self, data, seed: int, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """This rank's part of each global batch of the epoch (every rank gets at least one
        sample: a last batch smaller than the world repeats its own samples)."""
        from anygpu import distributed as dist

        for x, y in batches(data, self.global_batch, shuffle=True, seed=seed, epoch=epoch):
            if len(x) == self.global_batch:
                sizes = self.ddp.batch_sizes
            else:
                if len(x) < self.world_size:
                    keep = np.resize(np.arange(len(x)), self.world_size)
                    x, y = x[keep], (None if y is None else y[keep])
                sizes = dist.split_batch(len(x), self.ddp.rank_speeds, world_size=self.world_size)
            start = sum(sizes[: self.rank])
            part = slice(start, start + sizes[self.rank])
            self.ddp.arm(samples=sizes[self.rank])  # its backward reduces buckets while it runs
            yield x[part], (None if y is None else y[part])

    def sync(self, samples: int) -> None:
        """Average the gradients of this step across ranks (weighted by samples)."""
        self.ddp.sync_gradients(samples=samples)

    def global_losses(self, losses: list[float], counts: list[int]) -> list[float]:
        """Each step's loss over the whole global batch (sample-weighted mean of the ranks')."""
        from anygpu import distributed as dist

        sums = np.ascontiguousarray(np.stack([np.asarray(losses, np.float64) * np.asarray(counts, np.float64),
                                              np.asarray(counts, np.float64)]))
        dist.all_reduce_array(sums, dist.ReduceOp.SUM, "train: epoch losses")
        return [float(v) for v in sums[0] / np.maximum(sums[1], 1.0)]

    def end_epoch(self) -> None:
        """Wait until rank 0 has evaluated and written the epoch's files."""
        from anygpu.distributed.process_group import _need_group, _run

        group = _need_group("train")
        if group.size > 1:
            _run(group, group.comm.Barrier, "train: end of epoch", timeout=group.timeout * _EPOCH_END_TIMEOUT_FACTOR)
        self.ddp._last_sync_end = time.perf_counter()  # the next step's time starts here, not at the barrier

    def record(self) -> dict[str, Any]:
        """Facts for metrics.json (strings and numbers, as a checkpoint's history holds)."""
        facts: dict[str, Any] = {"world_size": self.world_size, "global_batch_size": self.global_batch,
                                 "rank_adapters": "; ".join(self.adapters),
                                 "rank_batch_sizes": ",".join(str(n) for n in self.ddp.batch_sizes)}
        if self.ddp.rank_speeds is not None:
            facts["rank_samples_per_second"] = ",".join(f"{s:.1f}" for s in self.ddp.rank_speeds)
        return facts
