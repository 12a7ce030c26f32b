"""ag.optim: torch.optim's SGD, Adam and AdamW (one fused GPU kernel per parameter
per step) and learning-rate schedulers (also reachable as `ag.optim.lr_scheduler`)."""

from . import schedulers
from . import schedulers as lr_scheduler
from .optimizers import SGD, Adam, AdamW, Optimizer, flatten_state_dict, unflatten_state_dict
from .schedulers import CosineAnnealingLR, LinearWarmup, LRScheduler, StepLR

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "flatten_state_dict", "unflatten_state_dict", "LRScheduler",
           "StepLR", "CosineAnnealingLR", "LinearWarmup", "schedulers", "lr_scheduler"]
