"""Row kernels chosen by the generic tuner (ops/tuner.py): softmax and its backward, and
their causal forms (softmax_causal, softmax_causal_backward), here; layer norm in
ops/norm_tune.py. The fallback is the looped kernel (kernels/softmax.wgsl, or
softmax_causal*.wgsl: one workgroup per row of the narrowest power of two from 32 to 256
threads that covers the row); the other candidates are its other widths and the register
kernels of ops/row_gen.py that hold the row (subgroup and tree reductions), for the
causal kinds as for the plain ones."""

from __future__ import annotations

import numpy as np

from . import tuner
from .row_gen import RowConfig, configs_for

__all__: list[str] = []  # nothing here is a Device op

_SIZES = (32, 64, 128, 256)


def fallback_size(cols: int) -> int:
    """Threads per row: a power of two from 32 to 256, no wider than the row needs."""
    size = 32
    while size < cols and size < 256:
        size *= 2
    return size


class RowTunable(tuner.Tunable):
    """A one-workgroup-per-row op over (dtype, rows, cols) problems; candidates are ints
    (threads of the looped kernel, the fallback first) and RowConfigs."""

    version = 3  # 3: rows of exactly a register config's capacity run (and are timed) in its exact form
    tune_from = {"gpu": 1 << 22, "cpu": 1 << 62}

    def __init__(self, name: str, dtype: str = "f32"):
        self.name = name
        # f16 results carry f16 rounding (2^-11 relative): the float64 check allows for it.
        self.rtol = 2e-3 if dtype == "f16" else 1e-4

    def bucket(self, p) -> str:
        return f"{p[0]}-rows{tuner.pow2(p[1])}-cols{tuner.pow2(p[2])}-m{p[2] % 4 == 0}"

    def work(self, p) -> float:
        return float(p[1] * p[2])

    def candidates(self, dev, p) -> list:
        first = fallback_size(p[2])
        limit = dev.limits.get("max-compute-invocations-per-workgroup", 256)
        loops: list = [first] + [size for size in _SIZES if size != first and size <= limit]
        return loops + configs_for(p[2], min(limit, 1024), "subgroup" in dev.features)

    def label(self, candidate) -> str:
        return candidate.name if isinstance(candidate, RowConfig) else str(candidate)

    def parse(self, label: str):
        return RowConfig.parse(label) if label.startswith("r") else int(label)

    def small(self, p):
        cols = min(p[2], 3001)
        if p[2] % 4 == 0:  # keep the vec4 / scalar kind of the full problem
            cols -= cols % 4
        return (p[0], 5, cols)

    def host(self, p, rng, count: int) -> list[np.ndarray]:
        arrays = [rng.standard_normal(p[1] * p[2]).astype(np.float32) for _ in range(count)]
        return [a.astype(np.float16) for a in arrays] if p[0] == "f16" else arrays


class _Softmax(RowTunable):
    def inputs(self, p, rng):
        return self.host(p, rng, 1 if self.name == "softmax" else 2)

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


class _CausalSoftmax(RowTunable):
    """softmax_causal and its backward over (dtype, rows, cols, length) problems: the looped
    kernel's widths and the register configs that hold the row, as for softmax."""

    # 2: the register kernels join the candidates (v1 picks were among the looped widths
    # only), and the bucket tells vec4 rows from scalar ones as softmax's does
    version = 2

    def bucket(self, p) -> str:
        return f"{p[0]}-rows{tuner.pow2(p[1])}-cols{tuner.pow2(p[2])}-len{tuner.pow2(p[3])}-m{p[2] % 4 == 0}"

    def small(self, p):
        """Two blocks of up to 300 rows, so that the kept part of the rows grows over up to
        300 columns (every unit of a register config serving 256-wide rows holds kept
        elements in some row), of softmax's small row length (the same vec4 or scalar units)."""
        length = min(p[3], 300)
        return (p[0], 2 * length, super().small(p)[2], length)

    def inputs(self, p, rng):
        return self.host(p, rng, 1 if self.name == "softmax_causal" else 2)

    def run(self, dev, size, p, buffers):
        if self.name == "softmax_causal":
            return dev.softmax_causal(buffers[0], p[1], p[2], p[3], size=size)
        return dev.softmax_causal_backward(buffers[0], buffers[1], p[1], p[2], p[3], size=size)

    def reference(self, p, arrays):
        rows, cols, length = p[1], p[2], p[3]
        kept = np.arange(cols)[None, :] <= (np.arange(rows) % length)[:, None]
        x = arrays[0].astype(np.float64).reshape(rows, cols)
        if self.name == "softmax_causal":
            e = np.where(kept, np.exp(x - np.where(kept, x, -np.inf).max(axis=1, keepdims=True)), 0.0)
            return e / e.sum(axis=1, keepdims=True)
        y = np.where(kept, arrays[1].astype(np.float64).reshape(rows, cols), 0.0)
        return y * (x - (x * y).sum(axis=1, keepdims=True))


TUNABLES = {"softmax": _Softmax("softmax"), "softmax_backward": _Softmax("softmax_backward")}
F16_TUNABLES = {"softmax": _Softmax("softmax", "f16"), "softmax_backward": _Softmax("softmax_backward", "f16")}
_CAUSAL = ("softmax_causal", "softmax_causal_backward")
CAUSAL_TUNABLES = {k: _CausalSoftmax(k) for k in _CAUSAL}
CAUSAL_F16_TUNABLES = {k: _CausalSoftmax(k, "f16") for k in _CAUSAL}


def choose(dev, kind: str, problem: tuple):
    """The looped width (int) or RowConfig for (dtype, rows, cols), or for the causal kinds
    (dtype, rows, cols, length)."""
    if kind in _CAUSAL:
        tunables = CAUSAL_F16_TUNABLES if problem[0] == "f16" else CAUSAL_TUNABLES
    else:
        tunables = F16_TUNABLES if problem[0] == "f16" else TUNABLES
    return tuner.choose(dev, tunables[kind], problem)
