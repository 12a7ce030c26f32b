"""mpiexec worker for fault tests. argv: MODE (killed | leaves) [REPORT].

killed: rank 1 is SIGKILLed at step 3 of a DDP training loop.
leaves: rank 1 returns early, without a word, while rank 0 keeps training: rank 0's next
        collective must fail within ANYGPU_DIST_TIMEOUT with DistributedError.
Rank 0 prints "finished" only if it got through every step (it must not).
With REPORT, a rank whose step raises writes "<type>: <message>" there before re-raising:
the launcher forwards stderr asynchronously, so a test reads the error from the file.
"""

import os
import signal
import sys

import numpy as np

import anygpu as ag
import anygpu.distributed as dist
from anygpu import nn, optim
from anygpu.nn import functional as F
from anygpu.nn.parallel import DistributedDataParallel

mode = sys.argv[1]
dist.init_process_group("mpi")
rank = dist.get_rank()
model = nn.Linear(5, 3)
ddp = DistributedDataParallel(model)
opt = optim.SGD(model.parameters(), lr=0.1)
report = sys.argv[2] if len(sys.argv) > 2 else None
for step in range(40):
    if rank == 1 and step == 3:
        if mode == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        else:
            sys.exit(0)  # a clean early exit (MPI_Finalize at interpreter exit), no word to the others
    x = np.random.default_rng([step, rank]).standard_normal((4, 5)).astype(np.float32)
    try:
        opt.zero_grad()
        F.mse_loss(ddp(ag.tensor(x)), ag.zeros(4, 3)).backward()
        opt.step()
    except Exception as error:
        if report is not None:
            with open(f"{report}.{rank}", "w") as file:
                file.write(f"{type(error).__name__}: {error}\n")
        raise
    print(f"rank {rank} step {step}", flush=True)
print(f"rank {rank} finished", flush=True)
