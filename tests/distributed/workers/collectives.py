"""mpiexec worker: collectives on Tensors, DistributedSampler from the process group.

argv: OUT. Rank r's inputs are fixed functions of r, so the test recomputes every expected
value with numpy. Writes OUT.<rank>.json.
"""

import json
import os
import sys

import numpy as np

import anygpu as ag
import anygpu.distributed as dist
from anygpu.utils.data import DistributedSampler


def data(rank, salt, shape=(3, 5)):
    return np.random.default_rng([salt, rank]).standard_normal(shape).astype(np.float32)


dist.init_process_group(backend="mpi")
rank, world = dist.get_rank(), dist.get_world_size()
out = {"rank": rank, "world": world, "local_rank": dist.get_local_rank(),
       "local_world": dist.get_local_world_size(), "initialized": dist.is_initialized(),
       "adapter_env": os.environ.get("ANYGPU_ADAPTER"), "adapter_index": ag.gpu().adapter_index}
for op in ("SUM", "AVG", "MAX", "MIN"):
    t = ag.tensor(data(rank, 1))
    same = t
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    out[f"all_reduce_{op}"] = t.numpy().tolist()
    out[f"all_reduce_{op}_in_place"] = same is t
ints = ag.tensor(np.arange(7, dtype=np.int32) * (rank + 2))
dist.all_reduce(ints)
out["all_reduce_int"] = ints.numpy().tolist()
try:
    dist.all_reduce(ag.tensor(np.arange(3, dtype=np.int32)), op=dist.ReduceOp.AVG)
    out["avg_int_error"] = None
except ValueError as error:
    out["avg_int_error"] = str(error)
b = ag.tensor(data(rank, 2, (4, 3)))
dist.broadcast(b, src=1)
out["broadcast"] = b.numpy().tolist()
gathered = [ag.zeros(2, 3) for _ in range(world)]
dist.all_gather(gathered, ag.tensor(data(rank, 3, (2, 3))))
out["all_gather"] = [g.numpy().tolist() for g in gathered]
scattered = ag.zeros(5)
dist.reduce_scatter(scattered, [ag.tensor(data(rank, 4 + k, (5,))) for k in range(world)])
out["reduce_scatter"] = scattered.numpy().tolist()
dist.barrier()
out["strings"] = dist.all_gather_strings(f"rank {rank} on {ag.gpu().adapter_name}")
sampler = DistributedSampler(list(range(23)), seed=5)
sampler.set_epoch(3)
out["sampler"] = list(sampler)
out["switch_interval"] = sys.getswitchinterval()  # lowered for the MPI worker thread
dist.destroy_process_group()
out["switch_interval_after"] = sys.getswitchinterval()  # and given back
out["initialized_after"] = dist.is_initialized()
with open(f"{sys.argv[1]}.{rank}.json", "w") as handle:
    json.dump(out, handle)
