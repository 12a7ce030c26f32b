"""Softmax workgroup sizes chosen by the generic tuner (ops/tuner.py): threads per row
32 ... 256, the fallback being the narrowest power of two that covers the row."""

from __future__ import annotations

import numpy as np

from . import tuner

__all__: list[str] = []  # nothing here is a Device op

_SIZES = (32, 64, 128, 256)


def fallback_size(cols: int) -> int:
    """Threads per row: a power of two from 32 to 256, no wider than the row needs."""
    size = 32
    while size < cols and size < 256:
        size *= 2
    return size


class _Softmax(tuner.Tunable):
    # problem: (dtype, rows, cols)
    version = 1
    tune_from = {"gpu": 1 << 22, "cpu": 1 << 62}

    def __init__(self, name: str):
        self.name = name

    def bucket(self, p) -> str:
        return f"{p[0]}-rows{tuner.pow2(p[1])}-cols{tuner.pow2(p[2])}"

    def work(self, p) -> float:
        return float(p[1] * p[2])

    def candidates(self, dev, p) -> list:
        first = fallback_size(p[2])
        limit = dev.limits.get("max-compute-invocations-per-workgroup", 256)
        return [first] + [size for size in _SIZES if size != first and size <= limit]

    def label(self, candidate) -> str:
        return str(candidate)

    def parse(self, label: str):
        return int(label)

    def small(self, p):
        return (p[0], 5, min(p[2], 3001))

    def inputs(self, p, rng):
        count = 1 if self.name == "softmax" else 2
        return [rng.standard_normal(p[1] * p[2]).astype(np.float32) for _ in range(count)]

    def run(self, dev, size, p, buffers):
        if self.name == "softmax":
            return dev.softmax(buffers[0], p[1], p[2], size=size)
        return dev.softmax_backward(buffers[0], buffers[1], p[1], p[2], size=size)

    def reference(self, p, arrays):
        x = arrays[0].astype(np.float64).reshape(p[1], p[2])
        if self.name == "softmax":
            e = np.exp(x - x.max(axis=1, keepdims=True))
            return e / e.sum(axis=1, keepdims=True)
        y = arrays[1].astype(np.float64).reshape(p[1], p[2])
        return y * (x - (x * y).sum(axis=1, keepdims=True))


TUNABLES = {"softmax": _Softmax("softmax"), "softmax_backward": _Softmax("softmax_backward")}


def choose(dev, kind: str, problem: tuple) -> int:
    return tuner.choose(dev, TUNABLES[kind], problem)
