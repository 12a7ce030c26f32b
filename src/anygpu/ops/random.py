"""Random masks (Layer 0), drawn on the GPU from a counter-based hash of (seed, index)."""

from __future__ import annotations

from ..runtime import load_shader
from ._common import check_buffer, grid_1d

__all__ = ["dropout"]


def dropout(dev, x, p: float, seed: int):
    """out = x * mask / (1 - p), mask[i] = 0 with probability p, a pure function of (seed, i).

    Calling it again with the same seed on the gradient applies the same mask (the backward)."""
    check_buffer("dropout", "x", x)
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    threshold = min(int(p * 2.0**32), 2**32 - 1)
    out = dev.empty(x.len)
    kernel = dev.kernel("dropout", load_shader("dropout.wgsl"), 1, 1, "IIIIf")
    dev.launch(kernel, [x], [out], (x.len, seed & 0xFFFFFFFF, seed >> 32, threshold, 1.0 / (1.0 - p)),
               grid_1d(dev, x.len))
    return out
