"""mpiexec worker: heterogeneous ranks. Rank 1 is made slower (it sleeps per sample, as a slower
adapter would compute); DistributedDataParallel(balance="throughput") must give it a smaller share
of the global batch, and the sample-weighted average must keep training equal to one process on
the whole global batch (torch, on rank 0).

argv: OUT. Writes OUT.<rank>.json: the split used at each step, measured speeds, final parameters.
"""

import json
import sys
import time

import numpy as np

import anygpu as ag
import anygpu.distributed as dist
from anygpu import nn, optim
from anygpu.nn import functional as F
from anygpu.nn.parallel import DistributedDataParallel

STEPS, GLOBAL, SLOW_SECONDS_PER_SAMPLE = 9, 16, 0.02

dist.init_process_group("mpi")
rank = dist.get_rank()
ag.manual_seed(3)
model = nn.Sequential(nn.Linear(6, 11), nn.SiLU(), nn.Linear(11, 3))
ddp = DistributedDataParallel(model, balance="throughput", global_batch_size=GLOBAL, balance_steps=3)
initial = {name: value.numpy() for name, value in model.state_dict().items()}
opt = optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
splits = []
for step in range(STEPS):
    rng = np.random.default_rng(step)
    x, y = rng.standard_normal((GLOBAL, 6)).astype(np.float32), rng.standard_normal((GLOBAL, 3)).astype(np.float32)
    splits.append(list(ddp.batch_sizes))
    mine = slice(ddp.batch_offset, ddp.batch_offset + ddp.local_batch_size)
    opt.zero_grad()
    loss = F.mse_loss(ddp(ag.tensor(x[mine])), ag.tensor(y[mine]))
    if rank == 1:
        time.sleep(SLOW_SECONDS_PER_SAMPLE * ddp.local_batch_size)
    loss.backward()
    opt.step()
result = {"splits": splits, "speeds": ddp.rank_speeds,
          "final": {name: value.numpy().tolist() for name, value in model.state_dict().items()}}
if rank == 0:
    import torch

    reference = torch.nn.Sequential(torch.nn.Linear(6, 11), torch.nn.SiLU(), torch.nn.Linear(11, 3))
    reference.load_state_dict({name: torch.tensor(value) for name, value in initial.items()})
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.2, momentum=0.5)
    for step in range(STEPS):
        rng = np.random.default_rng(step)
        x, y = rng.standard_normal((GLOBAL, 6)).astype(np.float32), rng.standard_normal((GLOBAL, 3)).astype(np.float32)
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(torch.tensor(x)), torch.tensor(y)).backward()
        ref_opt.step()
    result["torch"] = {name: value.tolist() for name, value in reference.state_dict().items()}
with open(f"{sys.argv[1]}.{rank}.json", "w") as handle:
    json.dump(result, handle)
