"""Host cost of recording and of a training step, eager vs captured (issue 11).

    python benchmarks/step_overhead.py [--json FILE] [--batch 256] [--hidden 512]

1. encode: microseconds per dispatch to encode 250 recorded dispatches into a command
   encoder, through direct C calls (runtime/native.py) and through wgpu-py's methods.
2. step: wall time per training step of the bench's MLP 784-512-512-10 (SGD) and of
   the digits CNN (Adam), eager and through anygpu.compile, with one synchronize per
   20 steps; and the host time of one call (call + submit, GPU idle before).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import anygpu as ag
import anygpu.nn.functional as F
from anygpu import nn


def encode_cost(dev) -> dict:
    x = dev.upload(np.ones(1000, np.float32))
    y = x
    fuse, dev.fuse = dev.fuse, False  # one dispatch per op (fusion would record 4 for the 250)
    try:
        for _ in range(250):
            y = dev.scale(y, 1.0)
    finally:
        dev.fuse = fuse
    pending = list(dev._pending)
    dev.flush()
    dev.synchronize()
    out = {}
    for mode in ("raw", "wgpu-py") * 2:
        samples = []
        for _ in range(15):
            encoder = dev._device.create_command_encoder()
            start = time.perf_counter()
            dev._encode(encoder, pending, dev._offset_ptrs if mode == "raw" else None)
            samples.append((time.perf_counter() - start) / len(pending) * 1e6)
            encoder.finish()
        out[mode] = round(statistics.median(samples), 3)
    return out


HIDDEN = [512]


def _mlp(batch, rng):
    h = HIDDEN[0]
    model = nn.Sequential(nn.Linear(784, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
    x = rng.random((batch, 784), dtype=np.float32)
    return model, ag.optim.SGD(model.parameters(), lr=0.01), x, rng.integers(0, 10, batch)


def _cnn(batch, rng):
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, 10))
    x = rng.standard_normal((32, 1, 8, 8), dtype=np.float32)
    return model, ag.optim.Adam(model.parameters(), lr=4e-3), x, rng.integers(0, 10, 32)


def make_step(build, batch: int):
    """(step function, its inputs) for the model `build` makes: one optimizer step on a
    cross-entropy loss, the model and optimizer held by the function."""
    ag.manual_seed(0)
    model, opt, x, y = build(batch, np.random.default_rng(0))

    def step(x_in, y_in):
        opt.zero_grad()
        loss = F.cross_entropy(model(x_in), y_in)
        loss.backward()
        opt.step()
        return loss
    return step, (ag.tensor(x), ag.tensor(y.astype(np.int32), dtype="int32"))


def wall_per_step(dev, run, x_t, y_t) -> float:
    """Median wall seconds per step over 5 rounds of 20 (one synchronize each), after 6 steps."""
    for _ in range(6):
        run(x_t, y_t)
    dev.synchronize()
    walls = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(20):
            run(x_t, y_t)
        dev.synchronize()
        walls.append((time.perf_counter() - start) / 20)
    return statistics.median(walls)


def step_cost(dev, build, batch: int) -> dict:
    out = {}
    for mode in ("eager", "captured", "eager", "captured"):
        step, (x_t, y_t) = make_step(build, batch)
        run = ag.compile(step) if mode == "captured" else step
        wall = wall_per_step(dev, run, x_t, y_t)
        dispatches = dev.stats["dispatches"]
        for _ in range(10):
            run(x_t, y_t)
        per_step = (dev.stats["dispatches"] - dispatches) / 10
        hosts = []
        for _ in range(20):
            dev.synchronize()
            start = time.perf_counter()
            run(x_t, y_t)
            dev.flush()
            hosts.append(time.perf_counter() - start)
        out[mode] = {"wall_ms": round(wall * 1e3, 4),
                     "host_ms": round(statistics.median(hosts) * 1e3, 4),
                     "dispatches_per_step": per_step}
        if mode == "captured":
            out[mode]["stats"] = dict(run.stats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=512, help="MLP width (smaller for software drivers)")
    args = parser.parse_args()
    HIDDEN[0] = args.hidden
    dev = ag.gpu()
    result = {"device": dev.adapter_name, "driver": dev.driver, "date": time.strftime("%Y-%m-%d"),
              "encode_us_per_dispatch": encode_cost(dev),
              "mlp_sgd": step_cost(dev, _mlp, args.batch), "cnn_adam": step_cost(dev, _cnn, 32)}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
