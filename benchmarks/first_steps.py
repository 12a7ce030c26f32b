"""Time to the first training steps from an empty tuning cache (issue 28).

Builds a nanoGPT-shaped GPT from anygpu.nn (default: 6 layers, 384 wide, 6 heads, block
256, batch 64, vocabulary 65, AdamW, no dropout) on random tokens, points ANYGPU_CACHE_DIR
at a new empty folder (unless --cache-dir is given), and prints the wall time from the
first step's start to the end of each of the first --first steps, then the mean step time
around steps 50, 100 and 200 (and --steps in all). Each step ends with loss.item(), so
the times include the GPU's work.

    python benchmarks/first_steps.py                       # empty cache (the issue's target: step 4 <= 3 s)
    python benchmarks/first_steps.py --cache-dir ~/.cache/anygpu   # warm cache, for comparison
    python benchmarks/first_steps.py --compile             # the step through anygpu.compile
    python benchmarks/first_steps.py --digits              # `anygpu train digits`: empty vs warm cache

Tuning settings are the tuner's environment (ANYGPU_TUNE_BUDGET, ANYGPU_TUNE_SHARE;
ops/tuner.py)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--vocab", type=int, default=65)
    p.add_argument("--steps", type=int, default=200, help="steps in all")
    p.add_argument("--first", type=int, default=10, help="steps whose time from the start is printed")
    p.add_argument("--cache-dir", help="tuning cache folder (default: a new empty one)")
    p.add_argument("--compile", action="store_true", help="run the step through anygpu.compile")
    p.add_argument("--json", help="also write the figures to this file")
    p.add_argument("--digits", action="store_true",
                   help="instead: time `anygpu train digits` with an empty cache, then with the warm one")
    p.add_argument("--repeat", type=int, default=3, help="--digits: empty/warm pairs (default 3)")
    return p.parse_args()


def digits(repeat: int) -> int:
    """`anygpu train digits` with a new empty cache, then again with the cache it left, `repeat`
    times (alternating, so both see the same machine); the ratio of the medians."""
    import statistics
    times: dict = {"empty": [], "warm": []}
    for _ in range(repeat):
        cache = tempfile.mkdtemp(prefix="anygpu-empty-cache-")
        env = dict(os.environ, ANYGPU_CACHE_DIR=cache)
        for run in ("empty", "warm"):
            out = tempfile.mkdtemp(prefix=f"anygpu-digits-{run}-")
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "anygpu", "train", "digits", "--out", out, "--no-progress"],
                                  env=env, capture_output=True, text=True)
            times[run].append(time.perf_counter() - start)
            if done.returncode != 0:
                print(done.stdout + done.stderr, file=sys.stderr)
                return done.returncode
            print(f"anygpu train digits, {run} cache ({cache}): {times[run][-1]:.2f} s", flush=True)
    empty, warm = statistics.median(times["empty"]), statistics.median(times["warm"])
    print(f"median empty {empty:.2f} s, warm {warm:.2f} s: empty / warm {empty / warm:.3f} (target <= 1.2)")
    return 0


def main() -> int:
    args = parse()
    if args.digits:
        return digits(args.repeat)
    os.environ["ANYGPU_CACHE_DIR"] = args.cache_dir or tempfile.mkdtemp(prefix="anygpu-empty-cache-")
    began = time.perf_counter()
    import numpy as np

    import anygpu as ag
    import anygpu.nn.functional as F
    from anygpu import nn
    from anygpu.bench.suite import gpt_module
    from anygpu.ops import tuner

    ag.manual_seed(0)
    model = gpt_module(nn, args.layers, args.width, args.heads, args.block, args.vocab)   # anygpu bench's GPT
    opt = ag.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)

    def step(idx, targets):
        loss = F.cross_entropy(model(idx), targets.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    run = ag.compile(step) if args.compile else step
    rng = np.random.default_rng(0)
    data = rng.integers(0, args.vocab, (8, args.batch, args.block + 1)).astype(np.int32)
    ready = time.perf_counter()
    print(f"model {args.layers}x{args.width}, {args.heads} heads, block {args.block}, batch {args.batch}; "
          f"import and build {ready - began:.2f} s; cache {os.environ['ANYGPU_CACHE_DIR']}; "
          f"budget {tuner.budget()} s, share {tuner.share()}", flush=True)
    ends, losses = [], []
    start = time.perf_counter()
    for n in range(args.steps):
        batch = data[n % len(data)]
        loss = run(ag.tensor(batch[:, :-1]), ag.tensor(batch[:, 1:]))
        losses.append(float(loss.item()))
        ends.append(time.perf_counter() - start)
        if n < args.first:
            print(f"step {n + 1}: {ends[-1]:.3f} s from the start (this step {ends[-1] - (ends[-2] if n else 0):.3f} s),"
                  f" loss {losses[-1]:.4f}, buckets being tuned {tuner.tuning()}", flush=True)

    def around(k: int) -> float | None:
        if k > len(ends):
            return None
        lo = max(k - 5, 1)
        return (ends[k - 1] - ends[lo - 1]) / (k - lo) if k > lo else None
    figures = {"to_step": ends[:args.first], "losses": losses[:args.first],
               "step_time": {k: around(k) for k in (50, 100, 200, args.steps)},
               "buckets_being_tuned_at_end": tuner.tuning(), "cache_entries": len(tuner.load_cache()),
               "compile": bool(args.compile)}
    for k, seconds in figures["step_time"].items():
        if seconds is not None:
            print(f"step time around step {k}: {seconds * 1e3:.1f} ms")
    if args.compile:
        print(f"compile: {run.stats}, reason: {run.reason()}")
        figures["compile_stats"] = dict(run.stats)
    print(f"buckets still being tuned: {figures['buckets_being_tuned_at_end']}; "
          f"cache entries: {figures['cache_entries']}; total {ends[-1]:.2f} s for {args.steps} steps")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
