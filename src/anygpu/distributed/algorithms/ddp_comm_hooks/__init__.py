"""torch.distributed.algorithms.ddp_comm_hooks: the built-in hooks of ``default_hooks``
(also importable as ``default``, as in torch). PowerSGD and the quantization hooks are not here."""

from . import default_hooks
from . import default_hooks as default

__all__ = ["default", "default_hooks"]
