"""Would a matmul that multiplies and adds in packed f16 (vec4<f16> FMAs), moving its
f16 partial sums into f32 every `chunk` steps of k, be as accurate as torch's fp16 matmul?

Simulated on the host (a fused f16 FMA is the exact product plus sum, rounded once to
f16), on random normal f16 operands with K=4096, against float64; beside torch CPU fp16
matmul and an f32 sum rounded once to f16 (what anygpu's f16 matmul does).

    python benchmarks/f16_chunk_error.py [--k 4096] [--size 64]
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--size", type=int, default=64, help="m = n")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    size, k = args.size, args.k
    a = rng.standard_normal((size, k)).astype(np.float16)
    b = rng.standard_normal((k, size)).astype(np.float16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64

    def report(label: str, got: np.ndarray) -> None:
        diff = np.abs(got.astype(np.float64) - want)
        print(f"{label:<28} max err / max |C| {diff.max() / np.abs(want).max():.2e}   "
              f"rms err / rms C {np.sqrt((diff ** 2).mean() / (want ** 2).mean()):.2e}")
    try:
        import torch
        report("torch CPU fp16 matmul", (torch.from_numpy(a) @ torch.from_numpy(b)).numpy())
    except ImportError:
        print("torch not importable: no torch figure")
    report("f32 sum, rounded to f16", (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16))
    for chunk in (4, 8, 16, 32):
        total = np.zeros((size, size), np.float32)
        for k0 in range(0, k, chunk):
            partial = np.zeros((size, size), np.float16)
            for kk in range(k0, min(k0 + chunk, k)):
                partial = (np.outer(a64[:, kk], b64[kk]) + partial).astype(np.float16)
            total = (total.astype(np.float64) + partial).astype(np.float32)
        report(f"f16 FMAs, f32 every {chunk:2d} k", total.astype(np.float16))


if __name__ == "__main__":
    main()
