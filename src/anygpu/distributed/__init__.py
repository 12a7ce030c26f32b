"""anygpu.distributed: data-parallel training on MPI, with torch.distributed's names.

One process per GPU, started by an MPI launcher (``mpiexec -n 2 python train.py``, a
hostfile, or Slurm's ``srun``). The transport is MPI through mpi4py (``pip install
anygpu[dist]`` brings mpi4py and the ``mpich`` wheel, so ``mpiexec`` exists without a system
MPI). Tensors travel through the host: a collective reads the tensor back from its GPU, runs
the MPI operation on the host array and writes the result into the same GPU buffer.

    import anygpu as ag, anygpu.distributed as dist
    dist.init_process_group("mpi")          # before any tensor: picks this rank's GPU
    t = ag.ones(3) * (dist.get_rank() + 1)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)  # in place; every rank holds 1 + 2 + ...

Every blocking wait is bounded: a collective that does not finish within the process
group's ``timeout`` (default 300 s, or ``ANYGPU_DIST_TIMEOUT`` seconds) raises
``DistributedError`` naming the operation, instead of hanging forever on a dead peer.
An uncaught exception on any rank aborts the whole MPI job (the launcher then stops the
other ranks), so one failing rank never leaves the others waiting.
"""

from __future__ import annotations

from .balance import split_batch
from .grad_bucket import GradBucket
from .process_group import (
    DistributedError, GroupMember, ProcessGroup, ReduceOp, abort, all_gather, all_gather_numbers, all_gather_strings, all_reduce,
    all_reduce_array, barrier, broadcast, destroy_process_group, get_local_rank, get_local_world_size, get_rank,
    export_launcher_env, gather, get_backend, get_default_backend_for_device, get_world_size, init_process_group, is_available, is_gloo_available,
    is_initialized, is_mpi_available, is_nccl_available, is_torchelastic_launched, launched_by_mpi, reduce,
    group, reduce_scatter, scatter, all_gather_into_tensor, reduce_scatter_tensor, all_gather_object,
    broadcast_object_list, gather_object, scatter_object_list, new_group,
)

__all__ = [
    "DistributedError", "ReduceOp", "abort", "all_gather", "all_gather_numbers", "all_gather_strings",
    "all_reduce", "all_reduce_array", "barrier", "broadcast", "destroy_process_group", "get_local_rank",
    "get_local_world_size", "get_rank", "get_world_size", "init_process_group", "is_available",
    "is_initialized", "launched_by_mpi", "reduce_scatter", "split_batch", "export_launcher_env", "reduce",
    "gather", "scatter", "get_backend", "is_mpi_available", "is_nccl_available", "is_gloo_available",
    "is_torchelastic_launched", "get_default_backend_for_device", "GradBucket", "ProcessGroup", "group",
    "GroupMember", "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather_object", "broadcast_object_list",
    "gather_object", "scatter_object_list", "new_group",
]

export_launcher_env()  # torchrun's RANK / LOCAL_RANK / WORLD_SIZE under mpiexec
