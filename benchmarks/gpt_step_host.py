"""Host cost of benchmarks/gpt_step.py's eager step: the main thread's CPU time per step and
the dispatches per step, for tiny shapes on lavapipe (where the GPU work runs on the CPU too,
in lavapipe's own threads, so wall-clock and cProfile numbers mix it in and move with the
machine's load).

    python benchmarks/gpt_step_host.py MODEL.py --layers 2 --width 32 --heads 2 --block 8 \
        --batch 2 --precision fp32            (any other gpt_step.py arguments pass through)

The step timer of gpt_step.py reads time.thread_time instead of time.perf_counter (median of
30 steps after 5); a read-back that spins while it waits is counted, a blocked wait is not.
Dispatches per step: Device.stats over 8 steps less over 4, so set-up work cancels."""

from __future__ import annotations

import contextlib
import io
import json
import pathlib
import runpy
import sys
import time

SCRIPT = str(pathlib.Path(__file__).with_name("gpt_step.py"))


def run(argv: list[str], thread_clock: bool) -> dict:
    sys.argv = ["gpt_step.py", *argv]
    saved = time.perf_counter
    if thread_clock:
        time.perf_counter = time.thread_time
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(SCRIPT, run_name="__main__")
    finally:
        time.perf_counter = saved
    return json.loads(out.getvalue().strip().splitlines()[-1])


def main() -> None:
    args = sys.argv[1:]
    import anygpu.ops
    timed = run([*args, "--warmup", "5", "--timed", "30"], True)
    dev = anygpu.ops.gpu()
    d0 = dev.stats["dispatches"]
    run([*args, "--losses", "4"], False)
    d1 = dev.stats["dispatches"]
    run([*args, "--losses", "8"], False)
    d2 = dev.stats["dispatches"]
    print(json.dumps({"host_cpu_ms_per_step": timed["ms_per_step"], "host_cpu_ms_min": timed["ms_min"],
                      "dispatches_per_step": ((d2 - d1) - (d1 - d0)) / 4}))


if __name__ == "__main__":
    main()
