"""mpiexec worker: DistributedDataParallel communication hooks (register_comm_hook).

argv: OUT. Trains the same small MLP for a few SGD steps on 2 ranks under each variant
(no hook, allreduce_hook, fp16_compress_hook, custom hooks, fp16 through a spy that records
each bucket), each rank writing OUT.<rank>.json: final parameters, gates held after each
backward, what the spy saw, error messages; rank 0 adds torch's parameters after the same
steps with torch's fp16 hook math (torch CPU, float16 tensors).
"""

import json
import sys

import numpy as np

import anygpu as ag
import anygpu.distributed as dist
from anygpu import nn, optim
from anygpu.distributed.algorithms.ddp_comm_hooks import default_hooks as default
from anygpu.futures import Future
from anygpu.nn import functional as F
from anygpu.nn.parallel import DistributedDataParallel

STEPS, PER_RANK = 6, 6


def batch(step):
    rng = np.random.default_rng([7, step])
    return (rng.standard_normal((2 * PER_RANK, 7)).astype(np.float32) * 3,
            rng.standard_normal((2 * PER_RANK, 5)).astype(np.float32))


def make_model(seed):
    ag.manual_seed(seed)
    return nn.Sequential(nn.Linear(7, 13), nn.Tanh(), nn.Linear(13, 5))


def sum_then_divide(state, bucket):  # all_reduce in place, then divide: a completed Future
    tensor = bucket.buffer()
    dist.all_reduce(tensor)
    tensor.div_(dist.group.WORLD.size())
    future = Future()
    future.set_result(tensor)
    return future


def chained(state, bucket):  # torch's way: async all_reduce, get_future(), then
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda done: done.value()[0] / dist.get_world_size())


def listed(state, bucket):  # older torch hooks returned a list of one Tensor
    tensor = bucket.buffer()
    dist.all_reduce(tensor, op=dist.ReduceOp.AVG)
    future = Future()
    future.set_result([tensor])
    return future


def through_python(state, bucket):  # torch's allreduce_hook itself, run as a custom hook
    return default.allreduce_hook(state, bucket)


seen = []


def spy(state, bucket):
    """fp16_compress_hook, recording its input bucket and the value it returns."""
    record = {"index": bucket.index(), "is_last": bucket.is_last(), "input": bucket.buffer().numpy().tolist(),
              "params": [id(p) for p in bucket.parameters()],
              "gradients_match": all(np.array_equal(g.numpy().reshape(-1), bucket.buffer().numpy()[o:o + g.numel()])
                                     for g, o in zip(bucket.gradients(), np.cumsum(
                                         [0] + [p.numel() for p in bucket.parameters()])))}
    future = default.fp16_compress_hook(state, bucket)
    record["output"] = future.wait().numpy().tolist()
    seen.append(record)
    return future


HOOKS = {"none": None, "allreduce": default.allreduce_hook, "fp16": default.fp16_compress_hook,
         "fp16-wrapper": default.fp16_compress_wrapper(default.allreduce_hook), "spy": spy,
         "sum-divide": sum_then_divide, "then": chained, "list": listed, "python-allreduce": through_python}


def train(rank, name, compiled=False):
    model = make_model(100 + rank)  # different on each rank: DDP broadcasts rank 0's
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.0005)  # two buckets
    hook = HOOKS[name]
    if hook is not None:
        ddp.register_comm_hook(None, hook)
    initial = {key: value.numpy().tolist() for key, value in model.state_dict().items()}
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    mine = slice(rank * PER_RANK, (rank + 1) * PER_RANK)
    held, order = [], [id(p) for p in model.parameters()]

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(ddp(x), y)
        loss.backward()
        held.append(len(ag.gpu()._gates))
        opt.step()
        return loss

    run = ag.compile(step) if compiled else step
    for index in range(STEPS):
        x, y = batch(index)
        run(ag.tensor(x[mine]), ag.tensor(y[mine]))
    out = {"final": {key: value.numpy().tolist() for key, value in model.state_dict().items()},
           "initial": initial, "held": held, "buckets": len(ddp._buckets)}
    if compiled:
        x, y = batch(0)
        out["replayed"] = run.stats["replayed"]
        out["reason"] = run.reason(ag.tensor(x[mine]), ag.tensor(y[mine]))
    if name == "spy":
        out["seen"] = [{**record, "params": [order.index(i) for i in record["params"]]} for record in seen]
    return out


def errors(rank):
    found = {}
    ddp = DistributedDataParallel(make_model(0))
    ddp.register_comm_hook(None, default.fp16_compress_hook)
    try:
        ddp.register_comm_hook(None, default.fp16_compress_hook)
    except RuntimeError as error:
        found["twice"] = str(error)
    try:
        DistributedDataParallel(make_model(0)).register_comm_hook(None, "not a hook")
    except TypeError as error:
        found["not_callable"] = str(error)
    try:
        DistributedDataParallel(make_model(0), weight_by_samples=True).register_comm_hook(None, chained)
    except ValueError as error:
        found["weighted"] = str(error)

    def wrong_size(state, bucket):
        future = Future()
        future.set_result(bucket.buffer()[:2])
        return future

    for name, hook in (("wrong_size", wrong_size), ("no_future", lambda state, bucket: bucket.buffer())):
        bad = DistributedDataParallel(make_model(0))
        bad.register_comm_hook(None, hook)
        x, y = batch(0)
        try:
            F.mse_loss(bad(ag.tensor(x)), ag.tensor(y)).backward()
        except ValueError as error:
            found[name] = str(error)
    # Registered after a first backward (torch allows it): the hook applies from the next one.
    late = DistributedDataParallel(make_model(0))
    calls = []

    def counting(state, bucket):
        calls.append(bucket.index())
        return default.allreduce_hook(state, bucket)

    x, y = batch(0)
    F.mse_loss(late(ag.tensor(x)), ag.tensor(y)).backward()
    late.register_comm_hook(dist.group.WORLD, counting)
    F.mse_loss(late(ag.tensor(x)), ag.tensor(y)).backward()
    found["late_calls"] = calls
    return found


def train_torch(initial):
    """torch CPU, one process: each rank's gradient on its half, then torch's fp16 hook
    math (round to float16, divide by 2 in float16, sum in float16, back to float32)."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(7, 13), torch.nn.Tanh(), torch.nn.Linear(13, 5))
    model.load_state_dict({key: torch.tensor(value) for key, value in initial.items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for index in range(STEPS):
        x, y = batch(index)
        grads = []
        for r in range(2):
            model.zero_grad()
            part = slice(r * PER_RANK, (r + 1) * PER_RANK)
            torch.nn.functional.mse_loss(model(torch.tensor(x[part])), torch.tensor(y[part])).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for p, g0, g1 in zip(model.parameters(), *grads):
            p.grad = ((g0.half() / 2) + (g1.half() / 2)).float()
        opt.step()
    return {key: value.tolist() for key, value in model.state_dict().items()}


dist.init_process_group("mpi")
rank = dist.get_rank()
results = {name: train(rank, name) for name in HOOKS}
results["compiled-allreduce"] = train(rank, "allreduce", compiled=True)
results["compiled-fp16"] = train(rank, "fp16", compiled=True)
results["errors"] = errors(rank)
if rank == 0:
    results["torch-fp16"] = train_torch(results["fp16"]["initial"])
with open(f"{sys.argv[1]}.{rank}.json", "w") as handle:
    json.dump(results, handle)
dist.destroy_process_group()
