"""layer_norm's backward with affine gradients, GPU time per call: the one-row kernel with two
column reductions of [rows, cols] against the chunked kernel (ops/layernorm._chunk_sums) at
several workgroup counts, next to torch's (CUDA events) where torch has a GPU.

    python3 benchmarks/ln_backward.py [--shapes 16384x384,16384x1536] [--reps 15]

Each row: median GPU microseconds of one call (10 calls per timed pass, dev.time_gpu)."""

from __future__ import annotations

import argparse
import json
import statistics

import numpy as np

import anygpu as ag
from anygpu.ops import layernorm


def _time(dev, record, reps: int, inner: int = 10) -> float:
    def many():
        for _ in range(inner):
            record()
    many()
    times = [dev.time_gpu(many) for _ in range(reps)]
    return statistics.median(t for t in times if t is not None) / inner * 1e6


def _torch_us(rows: int, cols: int, reps: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    x = torch.randn(rows, cols, device="cuda")
    g = torch.randn(rows, cols, device="cuda")
    w, b = torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, [cols], w, b, 1e-5)
    mask = [True, True, True]

    def call():
        return torch.ops.aten.native_layer_norm_backward(g, x, [cols], mean, rstd, w, b, mask)
    for _ in range(5):
        call()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        for _ in range(10):
            call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / 10)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="16384x384,16384x768,4096x1024")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--json")
    args = ap.parse_args()
    dev = ag.gpu()
    result = {"device": dev.adapter_name, "rows": []}
    for shape in args.shapes.split(","):
        rows, cols = (int(v) for v in shape.split("x"))
        rng = np.random.default_rng(0)
        x, g = (dev.upload(rng.standard_normal(rows * cols).astype(np.float32)) for _ in range(2))
        gamma, beta = (dev.upload(rng.standard_normal(cols).astype(np.float32)) for _ in range(2))
        _, stats = dev.layer_norm(x, gamma, beta, rows, cols)
        row = {"shape": shape}

        layernorm._CHUNKS_WORKGROUPS[0] = 0     # the one-row kernel and its two reductions
        row["one_row_us"] = round(
            _time(dev, lambda: layernorm.layer_norm_backward(dev, g, x, gamma, stats, rows, cols), args.reps), 2)
        for workgroups in (1024, 2048, 4096, 8192, 16384):
            layernorm._CHUNKS_WORKGROUPS[0] = workgroups
            row[f"chunks_{workgroups}_us"] = round(
                _time(dev, lambda: layernorm._chunk_sums(dev, g, x, gamma, stats, rows, cols), args.reps), 2)
        layernorm._CHUNKS_WORKGROUPS[0] = 1024
        row["torch_us"] = _torch_us(rows, cols, args.reps)
        print(json.dumps(row), flush=True)
        result["rows"].append(row)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
