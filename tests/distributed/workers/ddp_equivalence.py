"""mpiexec worker: DistributedDataParallel training vs torch on one process with the whole batch.

argv: OUT. For each variant (optimizer, split, weight_by_samples, no_sync) it trains a small MLP
for a few steps on 2 ranks; each rank writes OUT.<rank>.json with, per variant, its final
parameters, the initial (broadcast) ones and the state-dict keys; rank 0 adds torch's final
parameters after the same steps on the whole global batch.
"""

import json
import sys

import numpy as np

import anygpu as ag
import anygpu.distributed as dist
from anygpu import nn, optim
from anygpu.nn import functional as F
from anygpu.nn.parallel import DistributedDataParallel

VARIANTS = [("sgd", "even", False, False), ("adamw", "even", False, False), ("sgd", "uneven", True, False),
            ("sgd", "uneven", False, False), ("adamw", "uneven", True, True),
            ("sgd", "even", False, "compiled"), ("adamw", "uneven", True, "compiled")]
STEPS, GLOBAL = 6, 12
SPLITS = {"even": [6, 6], "uneven": [3, 9]}


def batch(step, micro=0):
    rng = np.random.default_rng([step, micro])
    return rng.standard_normal((GLOBAL, 7)).astype(np.float32), rng.standard_normal((GLOBAL, 5)).astype(np.float32)


def make_optimizer(library, parameters, name):
    if name == "sgd":
        return library.SGD(parameters, lr=0.1, momentum=0.9)
    return library.AdamW(parameters, lr=0.01, weight_decay=0.05)


def train_ddp(rank, optimizer_name, split, weighted, nosync):
    ag.manual_seed(100 + rank)  # different on each rank: the broadcast must make them equal
    model = nn.Sequential(nn.Linear(7, 13), nn.Tanh(), nn.Linear(13, 5))
    ddp = DistributedDataParallel(model, weight_by_samples=weighted, bucket_cap_mb=0.0005)  # several buckets
    initial = {name: value.numpy().tolist() for name, value in model.state_dict().items()}
    opt = make_optimizer(optim, model.parameters(), optimizer_name)
    sizes = SPLITS[split]
    start = sum(sizes[:rank])
    mine = slice(start, start + sizes[rank])
    held = []  # gradient uploads still held behind gates right after each backward (none waited for)
    if nosync == "compiled":  # the whole step through anygpu.compile: recorded, then replayed
        def train_step(x, y):
            opt.zero_grad()
            loss = F.mse_loss(ddp(x), y)
            loss.backward()
            opt.step()
            return loss

        compiled = ag.compile(train_step)
        for step in range(STEPS):
            x, y = batch(step)
            compiled(ag.tensor(x[mine]), ag.tensor(y[mine]))
        return {"final": {name: value.numpy().tolist() for name, value in model.state_dict().items()},
                "initial": initial, "replayed": compiled.stats["replayed"], "reason": compiled.reason(
                    ag.tensor(x[mine]), ag.tensor(y[mine]))}
    for step in range(STEPS):
        opt.zero_grad()
        if nosync:
            with ddp.no_sync():
                x, y = batch(step, 1)
                F.mse_loss(ddp(ag.tensor(x[mine])), ag.tensor(y[mine])).backward()
        x, y = batch(step)
        F.mse_loss(ddp(ag.tensor(x[mine])), ag.tensor(y[mine])).backward()
        held.append(len(ag.gpu()._gates))
        opt.step()
    return {"held": held, "buckets": len(ddp._buckets), "final": {name: value.numpy().tolist() for name, value in model.state_dict().items()},
            "initial": initial, "keys": list(ddp.state_dict().keys()),
            "module_keys": list(model.state_dict().keys())}


def train_torch(initial, optimizer_name, nosync):
    import torch

    reference = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.Tanh(), torch.nn.Linear(13, 5))
    reference.load_state_dict({name: torch.tensor(value) for name, value in initial.items()})
    opt = make_optimizer(torch.optim, reference.parameters(), optimizer_name)
    for step in range(STEPS):
        opt.zero_grad()
        if nosync:
            x, y = batch(step, 1)
            torch.nn.functional.mse_loss(reference(torch.tensor(x)), torch.tensor(y)).backward()
        x, y = batch(step)
        torch.nn.functional.mse_loss(reference(torch.tensor(x)), torch.tensor(y)).backward()
        opt.step()
    return {name: value.tolist() for name, value in reference.state_dict().items()}


dist.init_process_group("mpi")
rank = dist.get_rank()
assert dist.get_world_size() == 2
results = {}
for optimizer_name, split, weighted, nosync in VARIANTS:
    mode = "compiled" if nosync == "compiled" else "nosync" if nosync else "sync"
    key = f"{optimizer_name}-{split}-{'weighted' if weighted else 'plain'}-{mode}"
    results[key] = train_ddp(rank, optimizer_name, split, weighted, nosync)
    if rank == 0:
        results[key]["torch"] = train_torch(results[key]["initial"], optimizer_name, nosync is True)
with open(f"{sys.argv[1]}.{rank}.json", "w") as handle:
    json.dump(results, handle)
dist.destroy_process_group()
