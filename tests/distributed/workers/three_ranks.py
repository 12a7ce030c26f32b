"""mpiexec -n 3 worker: all_reduce on three ranks (NaN and inf among the inputs).

argv: OUT. Writes OUT.<rank>.json with the SUM and MAX of rank-dependent float tensors and
the MIN of int32 ones.
"""

import json
import sys

import numpy as np

import anygpu as ag
import anygpu.distributed as dist


def data(rank, salt, shape):  # as tests/distributed/test_distributed.py draws it
    return np.random.default_rng([salt, rank]).standard_normal(shape).astype(np.float32)


dist.init_process_group("mpi")
rank = dist.get_rank()
assert dist.get_world_size() == 3
mine = data(rank, 5, (7, 3))
if rank == 1:
    mine[0, 0] = np.nan
if rank == 2:
    mine[1, 1] = np.inf
out = {}
for name, op in (("sum", dist.ReduceOp.SUM), ("max", dist.ReduceOp.MAX)):
    t = ag.tensor(mine)
    dist.all_reduce(t, op=op)
    out[name] = t.numpy().tolist()
ints = ag.tensor(np.array([-3 + rank, -2, -1 - rank], np.int32))
dist.all_reduce(ints, op=dist.ReduceOp.MIN)
out["min_int"] = ints.numpy().tolist()
with open(f"{sys.argv[1]}.{rank}.json", "w") as handle:
    json.dump(out, handle)
dist.destroy_process_group()
