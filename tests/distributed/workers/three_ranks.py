"""mpiexec -n 3 worker: all_reduce on three ranks (NaN and inf among the inputs).

argv: OUT. Writes OUT.<rank>.json with the SUM and MAX of rank-dependent float tensors and
the MIN of int32 ones, and OUT.<rank>.big.npy with the SUM of 300007 floats (large enough
to be split across the copy threads when ANYGPU_DIST_COPY_THREADS > 1).
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
big = data(rank, 9, (300007,))
big[rank * 1000] = np.nan if rank == 1 else -np.inf if rank == 2 else big[rank * 1000]
t = ag.tensor(big)
dist.all_reduce(t)
np.save(f"{sys.argv[1]}.{rank}.big.npy", t.numpy())
with open(f"{sys.argv[1]}.{rank}.json", "w") as handle:
    json.dump(out, handle)
dist.destroy_process_group()
