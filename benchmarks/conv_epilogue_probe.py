"""Probe: conv2d's tuner choice and GPU time with fusion on and off, and conv + bias + ReLU with
the ReLU in the conv's store (fused) or as its own kernel (ANYGPU_FUSE=0 path), for the bench's
3x3 64->64 56x56 batch-32 layer. Prints one line per measurement."""

import time

import numpy as np

import anygpu as ag
from anygpu.bench.timing import time_anygpu
from anygpu.ops import conv_tune, tuner

dev = ag.gpu()
batch, c, size = (2, 8, 12) if ag.gpu().adapter_type == "CPU" else (32, 64, 56)
rng = np.random.default_rng(0)
x = dev.upload(rng.random((batch, c, size, size), dtype=np.float32) - 0.5)
w = dev.upload((rng.random((c, c, 3, 3), dtype=np.float32) - 0.5) * 0.1)
b = dev.upload(rng.random(c, dtype=np.float32))
problem = ("f32", batch, c, size, size, c, 3, 3, (1, 1), (1, 1), (1, 1), 1)
tunable = conv_tune.TUNABLES["conv2d"]
choices = {}
for fuse in (True, False):
    dev.fuse = fuse
    start = time.perf_counter()
    result = tuner.tune(dev, tunable, problem)
    choices[fuse] = result.choice
    timings = {k: (round(v * 1e6, 1) if isinstance(v, float) else v) for k, v in result.timings.items()}
    print(f"fuse={fuse} tune {time.perf_counter() - start:.1f} s: choice {tunable.label(result.choice)} "
          f"{result.seconds * 1e6:.1f} us; {timings}", flush=True)
for fuse in (True, False):
    dev.fuse = fuse
    tiles = choices[True]
    conv = time_anygpu(dev, lambda: dev.conv2d(x, w, b, batch, c, size, size, c, 3, 3, 1, 1, 1, 1, tiles=tiles), 0.1)
    relu = time_anygpu(dev, lambda: dev.unary("relu", dev.conv2d(x, w, b, batch, c, size, size, c, 3, 3, 1, 1, 1, 1,
                                                                   tiles=tiles)), 0.1)
    print(f"fuse={fuse} {tunable.label(tiles)}: conv {conv * 1e6:.1f} us, conv+relu {relu * 1e6:.1f} us", flush=True)
