"""mpiexec worker: DDP steps, then leave right after a backward, while the gradient
exchanges are still in flight (no value read back, so nothing waited for them).

argv: OUT MODE. MODE "destroy": destroy_process_group() must finish this rank's part of
them (nothing left behind a gate, the worker idle) before leaving. MODE "exit": the
interpreter just ends; the exit hook must do the same before MPI is finalized (a rank that
finalized MPI while its worker was inside an all-reduce crashed). Writes OUT.<rank>.json.
"""

import json
import sys

import numpy as np

import anygpu as ag
import anygpu.distributed as dist
from anygpu import nn, optim
from anygpu.nn import functional as F
from anygpu.nn.parallel import DistributedDataParallel

out, mode = sys.argv[1], sys.argv[2]
dist.init_process_group("mpi")
rank = dist.get_rank()
model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 1024), nn.Tanh(), nn.Linear(1024, 512)), bucket_cap_mb=0.5)
opt = optim.SGD(model.parameters(), lr=0.1)
rng = np.random.default_rng(rank)
for step in range(3):
    opt.zero_grad()
    x, y = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal((16, 512)).astype(np.float32)
    F.mse_loss(model(ag.tensor(x)), ag.tensor(y)).backward()
held = len(ag.gpu()._gates)
result = {"held_after_backward": held}
if mode == "destroy":
    dist.destroy_process_group()
    result["held_after_destroy"] = len(ag.gpu()._gates)
with open(f"{out}.{rank}.json", "w") as handle:
    json.dump(result, handle)
# mode "exit": end here, exchanges still in flight
