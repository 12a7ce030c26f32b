"""Layer-norm kernels chosen by the generic tuner (ops/tuner.py): the looped kernel
(kernels/layer_norm.wgsl, 64 threads per row) is the fallback, the register kernels of
ops/row_gen.py the other candidates (as softmax's, ops/softmax_tune.py): their one-pass
form, which takes its two-reduction path itself for rows it would not serve accurately,
its leaner forms (row_gen.lean_configs: the same results with fewer live registers), and
for f16 rows the word forms (row_gen.word_configs: rows read and written as u32 words)."""

from __future__ import annotations

import numpy as np

from . import tuner
from .row_gen import RowConfig, configs_for, lean_configs, word_configs
from .softmax_tune import RowTunable

__all__: list[str] = []  # nothing here is a Device op

_EPS = 1e-5


class _LayerNorm(RowTunable):
    # 3: the register kernels reduce once ((sum, sum of squares) from a shift); 4, 5: forms
    # since removed; 6: the lean forms "d" and "h"; 7: the f16 word forms "w4", "w8" (+ "h");
    # 8, 9, 10 (grid-stride forms): measured slower and removed (docs/BENCHMARKS.md), so back
    # to v7's candidates; 11 (two rows a workgroup): slower, removed; 12: v7's candidates, rows of
    # exactly a config's capacity timed in its exact form (row_gen.RowConfig.exact); 13: the output
    # step fused, gamma/beta compiled in (row_gen.generate's affine)
    version = 13

    def candidates(self, dev, p) -> list:
        limit = min(dev.limits.get("max-compute-invocations-per-workgroup", 256), 1024)
        subgroups = "subgroup" in dev.features
        return (["loop"] + configs_for(p[2], limit, subgroups) + lean_configs(p[2], limit, subgroups, p[0])
                + word_configs(p[2], limit, subgroups, p[0]))

    def parse(self, label: str):
        return label if label == "loop" else RowConfig.parse(label)

    def inputs(self, p, rng):
        # x [rows, cols], gamma [cols], beta [cols]
        return [self.host((p[0], 1, size), rng, 1)[0] for size in (p[1] * p[2], p[2], p[2])]

    def run(self, dev, config, p, buffers):
        return dev.layer_norm(buffers[0], buffers[1], buffers[2], p[1], p[2], _EPS, config=config)[0]

    def reference(self, p, arrays):
        x = arrays[0].astype(np.float64).reshape(p[1], p[2])
        mean = x.mean(axis=1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=1, keepdims=True)
        return (x - mean) / np.sqrt(var + _EPS) * arrays[1].astype(np.float64) + arrays[2].astype(np.float64)


TUNABLES = {"f32": _LayerNorm("layer_norm"), "f16": _LayerNorm("layer_norm", "f16")}


def choose(dev, problem: tuple):
    """'loop' or a RowConfig for (dtype, rows, cols)."""
    return tuner.choose(dev, TUNABLES[problem[0]], problem)
