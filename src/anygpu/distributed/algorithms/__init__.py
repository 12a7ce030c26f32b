"""torch.distributed.algorithms: DistributedDataParallel's communication hooks (ddp_comm_hooks)."""

from . import ddp_comm_hooks

__all__ = ["ddp_comm_hooks"]
