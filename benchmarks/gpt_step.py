"""One training step of nanoGPT's unmodified model.py, with torch or with anygpu as torch.

nanoGPT is not part of this repository: pass its model.py (`git clone
https://github.com/karpathy/nanoGPT`). The model is the issue's shape (6 layers, 384 wide,
6 heads, block 256, vocabulary 65, batch 64, dropout 0, AdamW with nanoGPT's
configure_optimizers, gradient clipping at 1.0 as its train.py does), trained on a fixed
synthetic character stream (a noisy periodic text, the same for every run).

    python benchmarks/gpt_step.py MODEL.py --backend anygpu --precision fp16-autocast
    python benchmarks/gpt_step.py MODEL.py --backend torch --precision bf16-autocast
    precisions: fp32, tf32 (torch only), fp16-autocast (with GradScaler), bf16-autocast

Prints one JSON line: ms per step (median of --timed steps, each timed to its loss.item()
after --warmup steps) and the first --losses losses."""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import time

import numpy as np


def tokens(n: int, vocab: int, seed: int = 0) -> np.ndarray:
    """A periodic character stream (period 97) with 10% of the characters replaced at random."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, vocab, 97)
    out = np.resize(base, n)
    noise = rng.random(n) < 0.1
    out[noise] = rng.integers(0, vocab, int(noise.sum()))
    return out.astype(np.int64)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--backend", choices=("torch", "anygpu"), default="anygpu")
    ap.add_argument("--precision", choices=("fp32", "tf32", "fp16-autocast", "bf16-autocast"), default="fp32")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--width", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--block", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--timed", type=int, default=20)
    ap.add_argument("--losses", type=int, default=0, help="train this many steps and report their losses")
    ap.add_argument("--no-scaler", action="store_true", help="fp16-autocast without GradScaler")
    ap.add_argument("--compile", action="store_true", help="anygpu: run the step through anygpu.compile")
    ap.add_argument("--cprofile", type=int, default=0, help="anygpu: host profile of this many steps (top functions)")
    ap.add_argument("--kernels", action="store_true",
                    help="anygpu with --compile: GPU time of each dispatch of the captured step, by kernel")
    ap.add_argument("--kernels-json", metavar="FILE",
                    help="with --kernels: write every dispatch (kernel, grid, buffer sizes, us) in replay order")
    args = ap.parse_args()
    if args.backend == "anygpu":
        from anygpu.utils.data import torch_alias
        torch_alias.install()   # `import torch` in model.py gives anygpu
    import torch
    spec = importlib.util.spec_from_file_location("nanogpt_model", args.model)
    model_py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_py)
    torch.manual_seed(1337)
    device = "cuda"
    if args.precision == "tf32" and args.backend == "torch":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    elif args.backend == "torch":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    conf = model_py.GPTConfig(block_size=args.block, vocab_size=65, n_layer=args.layers, n_head=args.heads,
                              n_embd=args.width, dropout=0.0, bias=True)
    model = model_py.GPT(conf).to(device)
    opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cuda")
    autocast = args.precision.endswith("autocast")
    dtype = torch.float16 if args.precision.startswith("fp16") else torch.bfloat16
    scaler = torch.cuda.amp.GradScaler(enabled=args.precision == "fp16-autocast" and not args.no_scaler)
    data = tokens(2_000_000, 65)
    rng = np.random.default_rng(1)

    def batch():
        ix = rng.integers(0, len(data) - args.block - 1, args.batch)
        x = np.stack([data[i:i + args.block] for i in ix])
        y = np.stack([data[i + 1:i + 1 + args.block] for i in ix])
        return torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)

    def step(x, y):
        if autocast:
            with torch.autocast(device_type="cuda", dtype=dtype):
                _, loss = model(x, y)
        else:
            _, loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    result = {"backend": args.backend, "precision": args.precision}
    if args.backend == "anygpu":
        import anygpu
        dev = anygpu.ops.gpu() if hasattr(anygpu, "ops") else None
        if dev is not None:
            result["runtime"] = getattr(dev, "runtime", "wgpu")
            result["adapter"] = dev.adapter_name if hasattr(dev, "adapter_name") else None
    if args.compile and args.backend == "anygpu":
        import anygpu
        step = anygpu.compile(step)
    losses = []
    if args.cprofile:
        import cProfile
        import pstats
        for _ in range(args.warmup):
            step(*batch()).item()
        batches = [batch() for _ in range(args.cprofile)]
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for x, y in batches:
            step(x, y).item()
        prof.disable()
        result["ms_per_step_profiled"] = round((time.perf_counter() - t0) * 1e3 / args.cprofile, 2)
        stats = pstats.Stats(prof)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(40)
    if args.kernels:
        import collections
        import sys
        sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
        from step_kernels import per_dispatch
        # Kernels tuned during the first steps (a cold cache) keep a step from being captured
        # until the tuner has settled: step until there is a replay to time.
        for _ in range(20):
            step(*batch()).item()
            (entry,) = step._signatures.values()
            if entry.replay is not None:
                break
        else:
            raise SystemExit(f"gpt_step --kernels: no captured step after 20 steps: {step.reason(*batch())}")
        dev = anygpu.ops.gpu()
        rows = per_dispatch(dev, entry.replay, 5)
        by_kernel = collections.defaultdict(lambda: [0, 0.0])
        for r in rows:
            by_kernel[r["kernel"][:70]][0] += 1
            by_kernel[r["kernel"][:70]][1] += r["us"]
        total = sum(v[1] for v in by_kernel.values())
        print(f"captured step: {len(rows)} dispatches, each alone {total / 1e3:.2f} ms in all")
        for name, (count, us) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:40]:
            print(f"  {us / 1e3:8.3f} ms  {count:5d}x  {name}")
        result["kernels_ms"] = round(total / 1e3, 3)
        if args.kernels_json:
            with open(args.kernels_json, "w") as handle:
                json.dump(rows, handle, indent=0)
        result["dispatches"] = len(rows)
        result["reason"] = step.reason(*batch())
    if args.losses:
        for _ in range(args.losses):
            losses.append(float(step(*batch()).item()))
        result["losses"] = losses
    else:
        for _ in range(args.warmup):
            step(*batch()).item()
        times = []
        for _ in range(args.timed):
            x, y = batch()
            t0 = time.perf_counter()
            step(x, y).item()
            times.append((time.perf_counter() - t0) * 1e3)
        result["ms_per_step"] = round(statistics.median(times), 2)
        result["ms_min"] = round(min(times), 2)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
