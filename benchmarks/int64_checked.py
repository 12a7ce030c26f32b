"""What the int64 overflow checks (issue 26 item 2, ops/intmath.py) cost: the checked kernel of
each op against the wrapping one it replaced, at one size, and the host-side check before a read.
Prints one JSON line.

    python benchmarks/int64_checked.py [--n 4194304] [--mm 512] [--reps 50]

Rows (ms per call, (time of 2r calls - time of r calls) / r, each batch ended by one read):
  add / mul / pow: broadcast_binary_int unchecked (i32 wrap, the templated kernel) vs check=
  matmul: matmul_int [mm, mm] @ [mm, mm] unchecked (the simple matmul kernel) vs check=True (96-bit sums)
  cumsum / prod: the scan kernel (one thread per row of 1024) vs the float32 path's cost is not
    comparable, so only its time is given
  cast: nd.cast f32 -> i32 vs cast_to_int
  read: Tensor.numpy of a 1-element float tensor with no checked kernel pending vs right after one
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _per_call(dev, fn, reps: int, read) -> float:
    def run(count):
        start = time.perf_counter()
        out = None
        for _ in range(count):
            out = fn()
        read(out)
        return time.perf_counter() - start
    run(2)  # compile and warm
    return (run(2 * reps) - run(reps)) / reps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1 << 22)
    parser.add_argument("--mm", type=int, default=512)
    parser.add_argument("--reps", type=int, default=50)
    args = parser.parse_args()

    import anygpu as ag
    from anygpu.ops import gpu, intmath

    dev = gpu()
    rng = np.random.default_rng(0)
    a = dev.upload(rng.integers(-100, 100, args.n).astype(np.int32), "i32")
    b = dev.upload(rng.integers(1, 5, args.n).astype(np.int32), "i32")

    def read(buf):
        dev.read(dev.copy(buf, n=1))
        intmath.raise_if_overflowed(dev)

    rows: dict[str, dict] = {}
    for name in ("add", "mul", "pow"):
        rows[name] = {
            check: _per_call(dev, lambda check=check: dev.broadcast_binary_int(
                name, a, (args.n,), b, (args.n,), check=name if check == "checked" else "")[0], args.reps, read)
            for check in ("wrapping", "checked")}
    m = args.mm
    x = dev.upload(rng.integers(-100, 100, m * m).astype(np.int32), "i32")
    rows["matmul"] = {check: _per_call(dev, lambda check=check: dev.matmul_int(x, x, 1, m, m, m, check=check == "checked"),
                                       max(args.reps // 10, 2), read) for check in ("wrapping", "checked")}
    small = dev.upload(rng.integers(-1, 2, args.n).astype(np.int32), "i32")
    rows["cumsum"] = {"checked": _per_call(dev, lambda: dev.scan_int(small, args.n // 1024, 1024, 1, "cumsum"),
                                           args.reps, read)}
    rows["prod"] = {"checked": _per_call(dev, lambda: dev.scan_int(small, args.n // 1024, 1024, 1, "prod"),
                                         args.reps, read)}
    floats = dev.upload(rng.standard_normal(args.n).astype(np.float32) * 1e6)
    rows["cast"] = {"wrapping": _per_call(dev, lambda: dev.cast(floats, "i32"), args.reps, read),
                    "checked": _per_call(dev, lambda: dev.cast_to_int(floats), args.reps, read)}
    one = ag.tensor([1.0])
    ints = ag.tensor([1, 2])
    rows["read"] = {"clean": _per_call(dev, lambda: None, args.reps, lambda _: one.numpy()),
                    "after_checked_add": _per_call(dev, lambda: None, args.reps,
                                                   lambda _: (ints + 1, one.numpy()))}
    print(json.dumps({"device": dev.adapter_name, "n": args.n, "mm": m, "ms_per_call": rows}))


if __name__ == "__main__":
    main()
