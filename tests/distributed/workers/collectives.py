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
# reduce to rank 1 (rank 0 keeps its values), gather to rank 0, scatter from rank 1
t = ag.tensor(data(rank, 6))
dist.reduce(t, dst=1)
out["reduce"] = t.numpy().tolist()
t = ag.tensor(data(rank, 7, (2, 2)))
gathered = [ag.zeros(2, 2) for _ in range(world)] if rank == 0 else None
dist.gather(t, gathered, dst=0)
out["gather"] = [g.numpy().tolist() for g in gathered] if rank == 0 else None
t = ag.zeros(3)
dist.scatter(t, [ag.tensor(data(r, 8, (3,))) for r in range(world)] if rank == 1 else None, src=1)
out["scatter"] = t.numpy().tolist()
out["backend"] = dist.get_backend()
# torch's tensor forms of all_gather / reduce_scatter, and the object collectives
whole = ag.zeros(world * 2, 3)
dist.all_gather_into_tensor(whole, ag.tensor(data(rank, 9, (2, 3))))
out["all_gather_into_tensor"] = whole.numpy().tolist()
block = ag.zeros(2, 2)
dist.reduce_scatter_tensor(block, ag.tensor(data(rank, 10, (world * 2, 2))))
out["reduce_scatter_tensor"] = block.numpy().tolist()
objects = [None] * world
dist.all_gather_object(objects, {"rank": rank, "name": f"r{rank}", "values": [rank, 1.5]})
out["all_gather_object"] = objects
sent = [f"from {rank}", {"epoch": 7 + rank}, None]
dist.broadcast_object_list(sent, src=1)
out["broadcast_object_list"] = sent
collected = [None] * world if rank == 0 else None
dist.gather_object(("rank", rank), collected, dst=0)
out["gather_object"] = collected
received = [None]
dist.scatter_object_list(received, [{"for": r} for r in range(world)] if rank == 1 else None, src=1)
out["scatter_object_list"] = received
out["new_group_is_world"] = dist.new_group() is dist.group.WORLD and dist.new_group([1, 0]) is dist.group.WORLD
try:
    dist.new_group([0])
except NotImplementedError as error:
    out["subgroup_error"] = str(error)
for name, call in (("object_list_error", lambda: dist.all_gather_object([None], 1)),
                   ("new_group_error", lambda: dist.new_group([0, 2])),
                   ("into_tensor_error", lambda: dist.all_gather_into_tensor(ag.zeros(3), ag.zeros(2)))):
    try:
        call()
    except ValueError as error:
        out[name] = str(error)
for name, call in (("reduce_error", lambda: dist.reduce(t, dst=world)),
                   ("gather_error", lambda: dist.gather(t, None, dst=rank)),
                   ("scatter_error", lambda: dist.scatter(t, [t] * world, src=1 - rank))):
    try:
        call()
    except ValueError as error:
        out[name] = str(error)
# DistributedDataParallel with torch's other arguments
from anygpu import nn  # noqa: E402
from anygpu.nn.parallel import DistributedDataParallel  # noqa: E402

ag.manual_seed(50 + rank)
layer = nn.Linear(3, 2)
own = layer.weight.numpy().tolist()
DistributedDataParallel(layer, init_sync=False, gradient_as_bucket_view=True, static_graph=True,
                        check_reduction=False, bucket_cap_mb=None)
out["init_sync_false_keeps_own"] = layer.weight.numpy().tolist() == own
DistributedDataParallel(layer, None, None, 0, True)  # torch's positional order: dim, broadcast_buffers
out["synced_weight"] = layer.weight.numpy().tolist()
try:
    DistributedDataParallel(layer, dim=1)
except ValueError as error:
    out["dim_error"] = str(error)
out["switch_interval"] = sys.getswitchinterval()  # lowered for the MPI worker thread
dist.destroy_process_group()
out["switch_interval_after"] = sys.getswitchinterval()  # and given back
out["initialized_after"] = dist.is_initialized()
with open(f"{sys.argv[1]}.{rank}.json", "w") as handle:
    json.dump(out, handle)
