"""Why the `anygpu bench` conv2d row and the tuner disagree: time the same conv2d layer
(3x3 64->64 56x56 batch 32, bias) by the tuner's clock (few repeats a round) and by the
bench's clock (up to ~250 repeats in one compute pass), with the tuned and the fallback
tiles, in one process. Prints one line per measurement."""

from __future__ import annotations

import sys
import time

import numpy as np

import anygpu
from anygpu.bench.suite import warm_up
from anygpu.bench.timing import time_anygpu
from anygpu.ops import conv_tune
from anygpu.ops.tuner import seconds_per_run


def main() -> None:
    dev = anygpu.gpu()
    warm_up(dev, 1.0)
    batch, c, size = (2, 8, 12) if "--small" in sys.argv else (32, 64, 56)  # --small: a smoke test
    rng = np.random.default_rng(0)
    x = dev.upload(rng.random((batch, c, size, size), dtype=np.float32) - 0.5)
    w = dev.upload((rng.random((c, c, 3, 3), dtype=np.float32) - 0.5) * 0.1)
    b = dev.upload(rng.random(c, dtype=np.float32))
    problem = ("f32", batch, c, size, size, c, 3, 3, (1, 1), (1, 1), (1, 1), 1)
    tuned = conv_tune.choose(dev, "conv2d", problem, c, batch * size * size)
    fallback = conv_tune.TUNABLES["conv2d"].candidates(dev, problem)[0]
    for label, tiles in (("tuned " + conv_tune._tiles_label(tuned), tuned),
                         ("fallback " + conv_tune._tiles_label(fallback), fallback)):
        def run(tiles=tiles):
            return dev.conv2d(x, w, b, batch, c, size, size, c, 3, 3, 1, 1, 1, 1, tiles=tiles)
        for repeats in (3, 10, 50, 240):
            s = seconds_per_run(dev, run, repeats=repeats, rounds=3)
            print(f"{label:32s} repeats {repeats:4d}: {s * 1e6:8.1f} us", flush=True)
        start = time.perf_counter()
        s = time_anygpu(dev, run, 0.2)
        print(f"{label:32s} time_anygpu: {s * 1e6:8.1f} us ({time.perf_counter() - start:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
