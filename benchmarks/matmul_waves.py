"""Waves of tiles: time matmul family members on m x 4096 x 4096 products beside torch.

    python3 benchmarks/matmul_waves.py CONFIGS MS OUT.json
    e.g. python3 benchmarks/matmul_waves.py 128x256x16_8x16_v4p,128x256x16_8x16_v4ps132 3968,4096,4224 waves.json

For each m (rows of A and C) every config (names as ops/matmul_gen.MatmulConfig.parse
reads them; a trailing s<N> is the stream-K form on N workgroups) runs the product on
the same random operands: TFLOP/s from GPU timestamps (median of rounds), the largest
error against torch's float64 product relative to its largest value, and torch CUDA's
own rate (TF32 off). With one workgroup per multiprocessor a tile-per-workgroup kernel
runs in waves of as many tiles as the GPU has multiprocessors: its rate follows
tiles / ceil(tiles / multiprocessors), which is how the 4096^3 product was found to
lose its last partial wave on an H200 (docs/BENCHMARKS.md, "stream-K"). Needs CUDA torch.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import torch

from anygpu.bench.timing import time_anygpu, time_torch
from anygpu.ops import Device, matmul_gen
from anygpu.ops.matmul_gen import MatmulConfig, Problem


def main(names: str, ms: str, out_path: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = Device()
    configs = [MatmulConfig.parse(name) for name in names.split(",")]
    results = {}
    for m in (int(v) for v in ms.split(",")):
        n = k = 4096
        problem = Problem(1, m, n, k)
        rng = np.random.default_rng(0)
        a = rng.random(m * k, dtype=np.float32) - 0.5
        b = rng.random(k * n, dtype=np.float32) - 0.5
        a_gpu, b_gpu, c_gpu = dev.upload(a), dev.upload(b), dev.empty(m * n)
        ta = torch.from_numpy(a).cuda().reshape(m, k)
        tb = torch.from_numpy(b).cuda().reshape(k, n)
        row = {"torch": problem.flops / time_torch(torch, "cuda", lambda: torch.matmul(ta, tb),
                                                   budget_s=0.6, rounds=5) / 1e12}
        want = torch.matmul(ta.double(), tb.double()).cpu().numpy()
        for config in configs:
            seconds = time_anygpu(dev, lambda: matmul_gen.launch(dev, config, problem, a_gpu, b_gpu, c_gpu),
                                  budget_s=0.6, rounds=5)
            row[config.name] = problem.flops / seconds / 1e12
            got = dev.read(c_gpu).reshape(m, n)
            row[config.name + " err"] = float(np.abs(got - want).max() / np.abs(want).max())
        results[m] = row
        print(m, " ".join(f"{key}={value:.3g}" for key, value in row.items()), flush=True)
    with open(out_path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
