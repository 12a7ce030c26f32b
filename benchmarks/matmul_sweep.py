"""Time many members of the matmul family on this machine's adapter, beside torch.

    python benchmarks/matmul_sweep.py [--sizes 1024,2048,4096,8192] [--configs A,B,...]
                                      [--json FILE] [--time-limit SECONDS]

For each square size every config (and the simple kernel) runs on the same random
operands; its GPU time is the median of timestamp-timed rounds (anygpu.bench's
clock), its result is compared with torch's (TF32 off) or NumPy's, and the table
gives TFLOP/s and the ratio to torch. Then the fastest configs run on the shapes
autograd and attention produce (transposed operands, odd sizes, batches). This is
how the autotuner's candidate list and the heuristic's defaults were chosen; the
JSON keeps every figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import anygpu as ag
from anygpu.bench.timing import time_anygpu
from anygpu.ops import matmul_gen, matmul_tune
from anygpu.ops.matmul_gen import MatmulConfig, Problem

SWEEP = (
    "128x128x8_8x8_v4p", "128x128x8_8x8_v4d", "128x128x8_8x8_v4", "128x128x16_8x8_v4p",
    "128x128x16_8x8_v4d", "128x128x16_8x8_v4", "128x128x32_8x8_v4d", "128x128x8_8x16_v4p",
    "128x128x8_8x16_v4d", "128x128x16_8x16_v4d", "128x128x8_16x8_v4d", "128x256x8_8x16_v4p",
    "128x256x8_8x16_v4d", "128x256x16_8x16_v4p", "256x128x8_16x8_v4p", "256x128x8_16x8_v4d",
    "64x64x8_4x4_v4p", "64x64x16_8x8_v4p", "64x64x16_8x8_v4d", "64x64x8_8x8_v4p",
    "128x64x16_8x8_v4p", "64x128x16_8x8_v4d", "32x32x16_4x4_v4", "128x128x8_8x8_v1p",
)


def torch_peer():
    try:
        import torch
    except ImportError:
        return None, "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch, ("cuda" if torch.cuda.is_available() else "cpu")


def measure(dev, torch, where, problem: Problem, configs, budget_s: float, full_check: bool):
    """{config name: {"seconds", "tflops", "rel_err"} or {"skipped": why}} and torch's seconds."""
    p = problem
    rng = np.random.default_rng(0)
    a = rng.random(p.a_len, dtype=np.float32) - 0.5
    b = rng.random(p.b_len, dtype=np.float32) - 0.5
    a_gpu, b_gpu = dev.upload(a), dev.upload(b)
    out = dev.empty(p.batch * p.m * p.n)
    want = None
    torch_s = None
    if torch is not None:
        from anygpu.bench.timing import time_torch
        ta = torch.from_numpy(a).to(where).reshape(-1, *((p.k, p.m) if p.trans_a else (p.m, p.k)))
        tb = torch.from_numpy(b).to(where).reshape(-1, *((p.n, p.k) if p.trans_b else (p.k, p.n)))
        ta_op = ta.transpose(1, 2) if p.trans_a else ta
        tb_op = tb.transpose(1, 2) if p.trans_b else tb
        torch_s = time_torch(torch, where, lambda: torch.matmul(ta_op, tb_op), budget_s=budget_s, rounds=3)
        want = (p.alpha * torch.matmul(ta_op, tb_op)).expand(p.batch, p.m, p.n).cpu().numpy().astype(np.float64)
    else:
        want = matmul_tune.reference(p, a, b)
    rows = min(p.m, 8) * p.n
    results = {}
    for config in configs:
        name = config.name if config else "simple"
        if config is not None and not matmul_tune.fits(dev, config):
            results[name] = {"skipped": "over the device's limits"}
            continue
        try:
            wall = {}
            seconds = time_anygpu(dev, lambda: matmul_gen.launch(dev, config, p, a_gpu, b_gpu, out),
                                  budget_s=budget_s, rounds=3, detail=wall)
            got = dev.read(out).reshape(p.batch, p.m, p.n) if full_check else None
        except ag.GpuError as exc:
            results[name] = {"skipped": " ".join(str(exc).split())[:300]}
            continue
        if got is not None:
            err = float(np.abs(got - want).max() / np.abs(want).max())
        else:   # big products: the first rows of the first matrix and the last of the last
            flat = want.reshape(-1)
            edges = matmul_tune.edge_rows(dev, out, p)
            ref = np.concatenate([flat[:rows], flat[-rows:]])
            err = float(np.abs(edges - ref).max() / np.abs(ref).max())
        results[name] = {"seconds": seconds, "tflops": p.flops / seconds / 1e12, "rel_err": err,
                         "wall_s_one_call": wall.get("wall_s_one_call")}
    return results, torch_s


def show(title: str, problem: Problem, results: dict, torch_s) -> None:
    torch_tf = problem.flops / torch_s / 1e12 if torch_s else None
    print(f"\n{title}: torch {torch_tf:.2f} TFLOP/s" if torch_tf else f"\n{title}")
    ranked = sorted(results.items(), key=lambda kv: kv[1].get("seconds", float("inf")))
    for name, r in ranked:
        if "skipped" in r:
            print(f"  {name:<22} skipped: {r['skipped'][:100]}")
            continue
        ratio = f"  x{torch_s / r['seconds']:.3f} of torch" if torch_s else ""
        flag = "" if r["rel_err"] < 1e-3 else "  WRONG"
        print(f"  {name:<22} {r['seconds'] * 1e3:9.3f} ms {r['tflops']:7.2f} TFLOP/s{ratio}  err {r['rel_err']:.1e}{flag}")
    sys.stdout.flush()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024,2048,4096,8192")
    parser.add_argument("--configs", default=",".join(SWEEP))
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--budget", type=float, default=0.15, help="seconds per measurement")
    parser.add_argument("--time-limit", type=float, default=170.0,
                        help="stop starting new work this many seconds after the device and torch are open")
    args = parser.parse_args(argv)
    dev = ag.gpu()
    torch, where = torch_peer()
    start = time.perf_counter()   # after opening the device: a cold start is not the sweep's time
    configs = [None] + [MatmulConfig.parse(c) for c in args.configs.split(",") if c]
    report = {"adapter": dev.adapter_name, "driver": dev.driver, "backend": dev.backend,
              "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "torch": getattr(torch, "__version__", None),
              "torch_device": where, "square": {}, "shapes": {}}

    def save():
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)

    print(f"{dev.adapter_name} ({dev.backend}, driver {dev.driver}); torch {report['torch']} on {where}")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    for size in sizes:
        if time.perf_counter() - start > args.time_limit:
            print(f"time limit: stopping before {size}")
            break
        problem = Problem(1, size, size, size)
        results, torch_s = measure(dev, torch, where, problem, configs, args.budget, full_check=size <= 2048)
        report["square"][str(size)] = {"torch_seconds": torch_s, "configs": results}
        show(f"{size}x{size}x{size}", problem, results, torch_s)
        save()
    # The fastest at the largest size measured, on the shapes training produces.
    if report["square"]:
        last = report["square"][max(report["square"], key=int)]["configs"]
        best = sorted((r["seconds"], n) for n, r in last.items() if "seconds" in r and r["rel_err"] < 1e-3)
        top = [None if n == "simple" else MatmulConfig.parse(n) for _, n in best[:5]]
        shapes = {
            "4096x4096x4096 NT": Problem(1, 4096, 4096, 4096, False, True),
            "4096x4096x4096 TN": Problem(1, 4096, 4096, 4096, True, False),
            "4095x4097x4093 odd": Problem(1, 4095, 4097, 4093),
            "batch 64 of 512x512x64 (attention scores)": Problem(64, 512, 512, 64, False, True),
            "8192x1024x4096 (MLP)": Problem(1, 8192, 1024, 4096),
            "256x256x256": Problem(1, 256, 256, 256),
            "512x512x512": Problem(1, 512, 512, 512),
        }
        for title, problem in shapes.items():
            if time.perf_counter() - start > args.time_limit:
                print(f"time limit: stopping before {title}")
                break
            candidates = top + [c for c in configs if c is not None and c.tile_m <= 64 and problem.m <= 512]
            results, torch_s = measure(dev, torch, where, problem, list(dict.fromkeys(candidates)), args.budget,
                                       full_check=problem.batch * problem.m * problem.n <= 1 << 22)
            report["shapes"][title] = {"problem": list(problem), "torch_seconds": torch_s, "configs": results}
            show(title, problem, results, torch_s)
            save()
    print(f"\nsweep took {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
