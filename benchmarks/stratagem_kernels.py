"""Where a stratagem's captured training step spends its GPU time, by kernel.

    python3 benchmarks/stratagem_kernels.py digits --precision 16-mixed [--steps 20] [--repeats 10]

Builds the stratagem's task as `anygpu train` does (its default batch size and lr), runs
--steps steps through the same captured step (anygpu.compile, train.loop._compiled_step),
times each dispatch of the replay alone (benchmarks/step_kernels.per_dispatch) and prints
the kernels by total time, then the wall time per replayed step (one read-back per step,
as the training loop's pipelined read: an upper bound)."""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))

import anygpu as ag  # noqa: E402
from anygpu.train import STRATAGEMS  # noqa: E402
from anygpu.train import loop  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("stratagem", choices=sorted(STRATAGEMS))
    ap.add_argument("--precision", choices=("32", "16-mixed"), default="32")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    from step_kernels import per_dispatch
    stratagem = STRATAGEMS[args.stratagem]
    settings = loop.Settings(stratagem=stratagem.name, epochs=1, batch_size=stratagem.batch_size, lr=stratagem.lr,
                             seed=0, out=pathlib.Path("/tmp/unused"), progress=False, precision=args.precision)
    ag.manual_seed(0)
    task = stratagem.build(settings)
    mixed = args.precision == "16-mixed"
    scaler = ag.amp.GradScaler("cuda", enabled=mixed)
    step = loop._compiled_step(task, scaler, mixed)
    task.model.train()
    batches = list(loop.batches(task.train_data, settings.batch_size, shuffle=True, seed=0, epoch=0))
    batches = [b for b in batches if len(b[0]) == settings.batch_size]
    rng = np.random.default_rng(0)
    dev = ag.gpu()
    for i in range(args.steps):
        x, y = batches[i % len(batches)]
        step(*task.inputs(x, y, rng)).item()
    (entry,) = step._signatures.values()
    if entry.replay is None:
        raise SystemExit(f"stratagem_kernels: the step was not captured: {step.reason()}")
    rows = per_dispatch(dev, entry.replay, args.repeats)
    by_kernel: dict = collections.defaultdict(lambda: [0, 0.0])
    for r in rows:
        by_kernel[r["kernel"][:70]][0] += 1
        by_kernel[r["kernel"][:70]][1] += r["us"]
    total = sum(v[1] for v in by_kernel.values())
    print(f"{args.stratagem} {args.precision}: {len(rows)} dispatches, each alone {total:.1f} us in all")
    for name, (count, us) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1]):
        print(f"  {us:8.1f} us  {count:4d}x  {name}")
    times = []
    for i in range(3 * len(batches)):
        x, y = batches[i % len(batches)]
        t0 = time.perf_counter()
        step(*task.inputs(x, y, rng))
        times.append(time.perf_counter() - t0)
    print(json.dumps({"stratagem": args.stratagem, "precision": args.precision, "dispatches": len(rows),
                      "kernels_us": round(total, 1), "host_ms_per_step": round(1e3 * float(np.median(times)), 3)}))


if __name__ == "__main__":
    main()
