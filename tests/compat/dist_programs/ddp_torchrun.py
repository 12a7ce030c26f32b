"""A data-parallel training script written for `torchrun` the usual way: LOCAL_RANK from the
environment, set_device before init_process_group, "nccl" on CUDA else "gloo",
DistributedDataParallel, DistributedSampler, a loss summed across ranks with all_reduce,
a barrier, destroy_process_group. The compat test runs it under torchrun with real torch
(CPU, gloo) and under mpiexec with `torch` resolved to anygpu, and compares what rank 0
prints."""

import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from shared_init import share_initial_weights


def main():
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 10)).astype(np.float32)
    y = (x @ rng.normal(size=(10, 3)).astype(np.float32)).argmax(1)
    dataset = TensorDataset(torch.tensor(x), torch.tensor(y))
    sampler = DistributedSampler(dataset, seed=3)  # shuffled as torch shuffles: 2 shards of 50
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)

    model = nn.Sequential(nn.Linear(10, 16), nn.Tanh(), nn.Linear(16, 3))
    if rank == 0:
        share_initial_weights(model)  # DDP gives every rank rank 0's weights
    model = DDP(model.to(device), device_ids=[local_rank] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    if rank == 0:
        print(f"world {world}, {len(loader)} steps per epoch")

    for epoch in range(3):
        sampler.set_epoch(epoch)
        total = torch.zeros(2, device=device)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            total += torch.stack([loss.detach() * len(xb), torch.tensor(float(len(xb)), device=device)])
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {(total[0] / total[1]).item():.6f} over {int(total[1].item())} samples")

    with torch.no_grad():
        correct = (model(torch.tensor(x, device=device)).argmax(1) == torch.tensor(y, device=device)).sum()
    dist.barrier()
    if rank == 0:
        print(f"accuracy {correct.item() / len(y):.4f}, first weight sum {model.module[0].weight.sum().item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
