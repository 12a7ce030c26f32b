"""Argument checks and launch helpers shared by every Layer-0 op."""

from __future__ import annotations

import numpy as np

from ..runtime import Buffer

WORKGROUP_1D = 256


def check_buffer(op: str, name: str, buf, expected: int | None = None, formula: str = "") -> None:
    """Raise ValueError unless `buf` is a Buffer with `expected` elements."""
    if not isinstance(buf, Buffer):
        raise ValueError(f"{op}: {name} must be a Buffer, got {type(buf).__name__}")
    if expected is not None and buf.len != expected:
        what = f"{formula} = {expected}" if formula else f"{expected}"
        raise ValueError(f"{op}: {name} has {buf.len} elements, expected {what}")


def check_same_len(op: str, a, b, names=("a", "b")) -> None:
    check_buffer(op, names[0], a)
    check_buffer(op, names[1], b)
    if a.len != b.len:
        raise ValueError(f"{op}: {names[0]} has {a.len} elements but {names[1]} has {b.len}; they must match")


def check_positive(op: str, **values) -> None:
    """Raise ValueError unless every named value is an int >= 1."""
    for name, value in values.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{op}: {name} must be a positive integer, got {value!r}")


def pair(value) -> tuple[int, int]:
    """An int or an (h, w) pair as an (h, w) pair of ints (unchecked: see check_pair)."""
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    h, w = value
    return int(h), int(w)


def check_pair(op: str, name: str, value, minimum: int) -> tuple[int, int]:
    """Normalise an int or (h, w) pair and check both parts are >= minimum: the one pair
    helper of Layer 0 and nn.functional."""
    try:
        h, w = pair(value)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: {name} must be an int or an (h, w) pair, got {value!r}") from None
    if h < minimum or w < minimum:
        raise ValueError(f"{op}: {name} must be >= {minimum}, got {(h, w)}")
    return h, w


def grid_1d(dev, n: int, per_workgroup: int = WORKGROUP_1D):
    """Workgroup grid covering n threads in groups of `per_workgroup` (folded to 2-D)."""
    return dev.grid(-(-n // per_workgroup))
