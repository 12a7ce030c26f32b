"""Does a CUDA context in the process change anygpu's memory-bound speed on the H200?

    python3 ctx.py none|available|context   (available: import torch and torch.cuda.is_available() only;
                                            context: torch.zeros(1, device="cuda") first, no torch work after)

Times layer norm 4096x4096 f32 (r256x4vgd) and f16 (r256x2vgw8) with gamma/beta after 0.3 s of
keeping the GPU busy, and samples nvidia-smi's clocks and performance state meanwhile."""
import subprocess
import sys

import numpy as np

from anygpu.bench.timing import _keep_busy, time_anygpu
from anygpu.ops import Device
from anygpu.ops.row_gen import RowConfig

mode = sys.argv[1]
if mode in ("available", "context"):
    import torch
    assert torch.cuda.is_available()
    if mode == "context":
        torch.zeros(1, device="cuda")
dev = Device()
rng = np.random.default_rng(0)
x = (rng.standard_normal((4096, 4096)) * 3).astype(np.float32)
g, b = rng.standard_normal(4096).astype(np.float32), rng.standard_normal(4096).astype(np.float32)
for dtype, label in (("f32", "r256x4vgd"), ("f16", "r256x2vgw8")):
    xb, gb, bb = (dev.upload(a.astype(np.float16) if dtype == "f16" else a, dtype) for a in (x, g, b))
    cfg = RowConfig.parse(label)
    run = lambda: dev.layer_norm(xb, gb, bb, 4096, 4096, 1e-5, config=cfg)[0]
    run(); dev.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=pstate,clocks.sm,clocks.mem,power.draw", "--format=csv,noheader",
                            "-lms", "100"], stdout=subprocess.PIPE, text=True)
    _keep_busy(dev, run, 0.6)
    smi.terminate()
    samples = smi.communicate()[0].strip().splitlines()
    times = [time_anygpu(dev, run, 0.1) * 1e6 for _ in range(3)]
    print(f"{mode:8s} {dtype} {label}: {' '.join(f'{t:.2f}' for t in times)} us; nvidia-smi while busy: {samples[-3:]}")
