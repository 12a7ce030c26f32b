"""Losses (Layer 0)."""

from __future__ import annotations

from ._common import check_same_len
from .reduce import reduce_inner

__all__ = ["mse_loss"]


def mse_loss(dev, pred, target):
    """Mean squared error: mean((pred - target)^2) over equal-length buffers, as a
    1-element Buffer. A tree reduction, accurate for millions of elements."""
    check_same_len("mse_loss", pred, target, ("pred", "target"))
    if pred.len == 0:
        raise ValueError("mse_loss: pred and target are empty; the mean of no elements is undefined")
    return reduce_inner(dev, "(a - b) * (a - b)", pred, target, 1, pred.len, scale=1.0 / pred.len)
