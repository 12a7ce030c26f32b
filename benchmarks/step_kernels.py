"""Where a captured training step's GPU time goes: each dispatch of the replay timed alone.

    python3 benchmarks/step_kernels.py [--json FILE] [--batch 256] [--hidden 512] [--repeats 20]

Captures the MLP 784-512-512-10 SGD step and the digits-CNN Adam step of
benchmarks/step_overhead.py through anygpu.compile, then encodes each dispatch of the
replay into its own compute pass with timestamps before and after (the median over
--repeats command buffers), and prints one line per dispatch: kernel, grid, microseconds.
The sum is an upper bound of the step's GPU time (separate passes cannot overlap); the
wall time per step with one synchronize per 20 steps is printed beside it.
Needs 'timestamp-query'.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import wgpu

import anygpu as ag

from step_overhead import HIDDEN, _cnn, _mlp, make_step, wall_per_step


def _captured(dev, build, batch):
    step, (x_t, y_t) = make_step(build, batch)
    run = ag.compile(step)
    wall = wall_per_step(dev, run, x_t, y_t)
    (entry,) = run._signatures.values()
    return entry.replay, wall, run


def per_dispatch(dev, replay, repeats: int) -> list[dict]:
    slot = dev._slot
    dispatches = [cmd for cmd in replay.commands if cmd[0] == "dispatch"]
    n = len(dispatches)
    query_set = dev._device.create_query_set(type=wgpu.QueryType.timestamp, count=2 * n)
    resolved = dev._device.create_buffer(size=16 * n, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    readable = dev._device.create_buffer(size=16 * n, usage=wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST)
    samples = [[] for _ in range(n)]
    for _ in range(repeats):
        encoder = dev._device.create_command_encoder()
        for j, (_, pipeline, group, ordinal, grid) in enumerate(dispatches):
            compute_pass = encoder.begin_compute_pass(timestamp_writes={
                "query_set": query_set, "beginning_of_pass_write_index": 2 * j, "end_of_pass_write_index": 2 * j + 1})
            compute_pass.set_pipeline(pipeline)
            compute_pass.set_bind_group(0, group, (ordinal * slot,))
            compute_pass.dispatch_workgroups(*grid)
            compute_pass.end()
        encoder.resolve_query_set(query_set, 0, 2 * n, resolved, 0)
        encoder.copy_buffer_to_buffer(resolved, 0, readable, 0, 16 * n)
        dev._queue.submit([encoder.finish()])
        readable.map_sync(wgpu.MapMode.READ, 0, 16 * n)
        stamps = np.frombuffer(readable.read_mapped(0, 16 * n, copy=True), dtype=np.uint64).reshape(n, 2)
        readable.unmap()
        for j in range(n):
            samples[j].append(max(int(stamps[j, 1]) - int(stamps[j, 0]), 0) * 1e-3)
    rows = []
    by_ordinal = {cmd[3]: i for i, cmd in enumerate(dispatches)}
    for ordinal, j in sorted(by_ordinal.items(), key=lambda item: item[1]):
        kernel, buffers, grid = replay._dispatch_info[ordinal]
        rows.append({"kernel": kernel.name, "grid": list(grid), "buffers": [b.size for b in buffers],
                     "us": round(statistics.median(samples[j]), 2)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    HIDDEN[0] = args.hidden
    dev = ag.gpu()
    result = {"device": dev.adapter_name, "driver": dev.driver, "date": time.strftime("%Y-%m-%d")}
    for name, build, batch in (("mlp_sgd", _mlp, args.batch), ("cnn_adam", _cnn, 32)):
        replay, wall, _run = _captured(dev, build, batch)
        rows = per_dispatch(dev, replay, args.repeats)
        total = sum(r["us"] for r in rows)
        result[name] = {"wall_us": round(wall * 1e6, 1), "sum_us": round(total, 1), "dispatches": rows}
        print(f"{name}: wall {wall * 1e6:.1f} us per step; {len(rows)} dispatches, each alone: {total:.1f} us")
        for r in rows:
            print(f"  {r['us']:8.2f} us  {r['kernel'][:60]:60s} grid {r['grid']}  buffers {r['buffers']}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)


if __name__ == "__main__":
    main()
