"""Learning-rate schedulers with torch.optim.lr_scheduler's behaviour.

Create one after its optimizer and call `step()` once per epoch (or iteration),
after `optimizer.step()`. Constructing a scheduler performs step 0: it records
each group's `initial_lr` and sets the lr for step 0. The updates are torch's
recursive ("chainable") forms, so the lr sequences equal torch's.
"""

from __future__ import annotations

import math
from typing import Any

from .optimizers import Optimizer

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LinearWarmup"]


class LRScheduler:
    """Base class: subclasses implement `get_lr()` (the lrs for `last_epoch`)."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                                   "a scheduler with last_epoch >= 0 (load the optimizer's state first)")
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self._is_initial = True
        self.step()
        self._is_initial = False

    def get_lr(self) -> list[float]:
        raise NotImplementedError

    def _current_lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def step(self) -> None:
        """Advance one epoch and set every group's lr."""
        self._step_count += 1
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = self._current_lrs()

    def get_last_lr(self) -> list[float]:
        """The lr of each parameter group set by the last `step()`."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer (plain numbers and lists)."""
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    """Multiplies each group's lr by `gamma` every `step_size` epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if int(step_size) != step_size or step_size <= 0:
            raise ValueError(f"StepLR: step_size must be a positive integer, got {step_size!r}")
        self.step_size = int(step_size)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current_lrs()
        return [lr * self.gamma for lr in self._current_lrs()]


class CosineAnnealingLR(LRScheduler):
    """lr_t = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2, computed
    recursively as torch does (so it also composes with other changes to the lr)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        if T_max <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be positive, got {T_max!r}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t, t_max, eta_min = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._current_lrs()
        if self._step_count == 1 and t > 0:  # resuming at last_epoch: the closed form
            return [eta_min + (base - eta_min) * (1 + math.cos(t * math.pi / t_max)) / 2 for base in self.base_lrs]
        if (t - 1 - t_max) % (2 * t_max) == 0:
            return [lr + (base - eta_min) * (1 - math.cos(math.pi / t_max)) / 2
                    for base, lr in zip(self.base_lrs, self._current_lrs())]
        return [(1 + math.cos(math.pi * t / t_max)) / (1 + math.cos(math.pi * (t - 1) / t_max))
                * (lr - eta_min) + eta_min for lr in self._current_lrs()]


class LinearWarmup(LRScheduler):
    """Linear warm-up: multiplies each group's base lr by a factor that grows linearly
    from `start_factor` at step 0 to 1 at step `warmup_steps`, then stays at 1.

    lr_t = base_lr * (start_factor + (1 - start_factor) * min(t, warmup_steps) / warmup_steps).
    The sequence equals torch.optim.lr_scheduler.LinearLR(optimizer, start_factor,
    end_factor=1.0, total_iters=warmup_steps) (same recursive form); start_factor
    defaults to LinearLR's 1/3 and must be in (0, 1]. warmup_steps=0 leaves the lr alone."""

    def __init__(self, optimizer: Optimizer, warmup_steps: int, start_factor: float = 1.0 / 3, last_epoch: int = -1):
        if not 0.0 < start_factor <= 1.0:
            raise ValueError(f"LinearWarmup: start_factor must be in (0, 1], got {start_factor!r}")
        if int(warmup_steps) != warmup_steps or warmup_steps < 0:
            raise ValueError(f"LinearWarmup: warmup_steps must be a non-negative integer, got {warmup_steps!r}")
        self.warmup_steps = int(warmup_steps)
        self.start_factor = start_factor
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t, total, start = self.last_epoch, self.warmup_steps, self.start_factor
        if total == 0:  # no warm-up at all (LinearLR would stay at start_factor)
            return self._current_lrs()
        if t == 0:
            return [lr * start for lr in self._current_lrs()]
        if self._is_initial or t > total:
            return self._current_lrs()
        return [lr * (1.0 + (1.0 - start) / (total * start + (t - 1) * (1.0 - start))) for lr in self._current_lrs()]
