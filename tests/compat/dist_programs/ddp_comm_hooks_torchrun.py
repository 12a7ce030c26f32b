"""A torchrun script with DDP communication hooks: torch's fp16_compress_hook from
torch.distributed.algorithms.ddp_comm_hooks, then a hook of its own (an asynchronous
all_reduce, get_future(), then a division by dist.group.WORLD's size). The compat test runs
it under torchrun with real torch (CPU, gloo) and under mpiexec with `torch` resolved to
anygpu, and compares what rank 0 prints."""

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks as default
from torch.nn.parallel import DistributedDataParallel as DDP

from shared_init import share_initial_weights


def average_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    group = state if state is not None else dist.group.WORLD
    future = dist.all_reduce(bucket.buffer(), group=group, async_op=True).get_future()
    return future.then(lambda done: done.value()[0].div_(group.size()))


def train(model, x, y, rank, world, epochs, name):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    per_rank = len(x) // world
    for epoch in range(epochs):
        total = torch.zeros(2)
        for start in range(0, per_rank, 10):
            lo = rank * per_rank + start
            xb, yb = torch.tensor(x[lo:lo + 10]), torch.tensor(y[lo:lo + 10])
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += torch.stack([loss.detach() * len(xb), torch.tensor(float(len(xb)))])
        dist.all_reduce(total)
        if rank == 0:
            print(f"{name} epoch {epoch}: mean loss {(total[0] / total[1]).item():.6f}")


def main():
    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    rng = np.random.default_rng(1)
    x = rng.normal(size=(80, 12)).astype(np.float32)
    y = (x @ rng.normal(size=(12, 4)).astype(np.float32)).argmax(1)

    model = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 4))
    if rank == 0:
        share_initial_weights(model)
    initial = {key: value.clone() for key, value in model.state_dict().items()}
    compressed = DDP(model, bucket_cap_mb=0.001)  # several buckets
    compressed.register_comm_hook(dist.group.WORLD, default.fp16_compress_hook)
    train(compressed, x, y, rank, world, 3, "fp16_compress_hook")

    other = nn.Sequential(nn.Linear(12, 24), nn.Tanh(), nn.Linear(24, 4))
    other.load_state_dict(initial)
    averaged = DDP(other)
    averaged.register_comm_hook(None, average_hook)
    train(averaged, x, y, rank, world, 2, "average_hook")
    if rank == 0:
        print(f"local rank {local_rank}: weight sums {model[0].weight.sum().item():.6f} "
              f"{other[2].weight.sum().item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
