"""ag.optim: torch.optim's SGD, Adam, AdamW, Adadelta, Adagrad, RMSprop, NAdam and RAdam (one fused
GPU kernel per parameter per step), Adamax, Rprop, ASGD, LBFGS and learning-rate schedulers (also reachable as
`ag.optim.lr_scheduler`)."""

import sys as _sys

from . import schedulers
from . import schedulers as lr_scheduler

# `import torch.optim.lr_scheduler` / `from torch.optim.lr_scheduler import StepLR` as in torch.
_sys.modules[__name__ + ".lr_scheduler"] = schedulers
from .adaptive import ASGD, Adadelta, Adagrad, Adamax, NAdam, RAdam, RMSprop, Rprop
from .lbfgs import LBFGS
from .optimizers import SGD, Adam, AdamW, Optimizer, flatten_state_dict, unflatten_state_dict
from .schedulers import (
    ConstantLR, CosineAnnealingLR, CosineAnnealingWarmRestarts, ExponentialLR, LambdaLR, LinearLR, LinearWarmup,
    LRScheduler, MultiStepLR, OneCycleLR, PolynomialLR, ReduceLROnPlateau, StepLR, SequentialLR, ChainedScheduler,
    MultiplicativeLR, CyclicLR,
)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "Adadelta", "Adagrad", "RMSprop", "NAdam", "RAdam", "Adamax",
           "Rprop", "LBFGS", "ASGD",
           "flatten_state_dict", "unflatten_state_dict", "LRScheduler", "StepLR", "CosineAnnealingLR", "LinearWarmup",
           "LambdaLR", "MultiStepLR", "ExponentialLR", "OneCycleLR", "ReduceLROnPlateau", "ConstantLR", "LinearLR",
           "PolynomialLR", "CosineAnnealingWarmRestarts", "SequentialLR", "ChainedScheduler",
           "MultiplicativeLR", "CyclicLR", "schedulers",
           "lr_scheduler"]
