"""Where the matrix flash kernels' time goes: each kernel (forward, dq, dkv) of
ops/flash_sgmat.py timed at one shape, whole and with parts of its text generated away
(ablations: the results are wrong; only the time means anything).

    ANYGPU_RUNTIME=dawn python benchmarks/flash_probe.py            # every variant, each in a child
    ANYGPU_RUNTIME=dawn python benchmarks/flash_probe.py --variant V  # one, in this process

Variants: base; ns2 and ns1 (2 or 1 subgroups a workgroup, key tiles 32 or 16 wide);
noelem (no elementwise pass over the scratch: _quads gives nothing); nomma (the products'
multiply-accumulates dropped: their loads are then dead, the stores kept); bare (both);
skeleton (the key-tile loop's staging and barriers without its body); nostage (the body
without the per-tile fetch and stash); nobar (no workgroupBarrier); sp16 (the probabilities
stored one f16 a store, as before session 19); nodvec (dQ without its reads of O); robustoff
(Dawn's robustness off, ANYGPU_DAWN_TOGGLES=disable_robustness); and what ANYGPU_FLASH_*
switches of the generator are named with --env NAME=VALUE. Times are us per dispatch: (time
of 2n dispatches - time of n) / n, each the least of three runs ended by one synchronize, at
causal nanoGPT attention (64 x 6 heads, 256 x 64) unless --shape B,H,T,D. Prints one JSON
line per variant.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

VARIANTS = ("base", "ns2", "ns1", "noelem", "nomma", "robustoff", "skeleton", "nostage", "nobar", "bare", "sp16", "nodvec")


def _ablate(variant: str) -> None:
    from anygpu.ops import flash_sgmat as fs
    tiles, gen = fs._tiles, fs.generate
    if variant == "skeleton":     # the tile loop's staging and barriers, no body
        fs._tiles = lambda s, var, first, copies, body, extra=None: tiles(s, var, first, copies, [], extra)
    elif variant == "nostage":    # the body on whatever the tiles hold: no per-tile fetch or stash
        fs._tiles = lambda s, var, first, copies, body, extra=None: tiles(s, var, first, [], body, None)
    elif variant == "nobar":      # every workgroupBarrier() dropped
        fs.generate = lambda kind, s: gen(kind, s).replace("workgroupBarrier();", "")
    elif variant == "nodvec":     # dQ's Dvec = rowsum(dO * O) from dO alone: no reads of O
        fs.generate = lambda kind, s: re.sub(r"let ou(\d+) = O\[[^;]*;", r"let ou\1 = gu\1;", gen(kind, s))
    elif variant == "bare":
        _ablate("noelem")
        _ablate("nomma")
    elif variant == "sp16":
        fs._P_UNIT = 1
    elif variant in ("ns2", "ns1"):
        n = int(variant[-1])
        fs.subgroups_for = lambda *a, **k: n
    elif variant == "noelem":
        fs._quads = lambda s: []
    elif variant == "nomma":
        def products(name, lefts, count, arr, major, off, pitch, dst):
            L = []
            for b in range(dst):
                L.append(f"    var {name}{b} = AM();")
                L += [f"    let {name}{b}_{kk} = subgroupMatrixLoad<RM, {major}>(&{arr}, {off(b, kk)}, {pitch});"
                      for kk in range(count)]
                L.append(f"    subgroupMatrixStore<row_major>(&sS, sbase + {4 * b}u, {name}{b}, SW);")
            return L
        fs._products = products
        fs._accumulate = lambda *a: []
    if hasattr(fs.generate, "cache_clear"):
        fs.generate.cache_clear()


def run_one(variant: str, shape, reps: int) -> dict:
    if variant == "robustoff":
        os.environ["ANYGPU_DAWN_TOGGLES"] = "disable_robustness"
    from anygpu.ops import flash_attention, flash_sgmat as fs, gpu
    _ablate(variant)
    dev = gpu()
    if os.environ.get("FLASH_PROBE_EMULATE") == "1":   # lavapipe: the emulated text (to check this script)
        from anygpu.ops.sgmat_emulate import emulate
        real = fs.generate
        fs.generate = lambda kind, s: emulate(real(kind, s))
        fs.config = lambda _: (int(dev.limits["max-compute-workgroup-storage-size"]) - 512, 256)
    B, H, T, D = shape
    rng = np.random.default_rng(0)
    z = B * H
    q, k, v, g = (dev.upload(rng.standard_normal(z * T * D).astype(np.float16), "f16") for _ in range(4))
    c = flash_attention._check("probe", q, k, v, z, T, T, D, D, None, True, None, None, 0.0, None)
    out, lse = dev.empty(z * T * D, "f16"), dev.empty(z * T, "f32")
    dq, dk, dv = (dev.empty(z * T * D, "f16") for _ in range(3))
    ld = dev.empty(2 * z * T, "f32")
    calls = {
        "forward": lambda: fs._launch(dev, "forward", c, [q, k, v], [out, lse], T),
        "dq": lambda: fs._launch(dev, "dq", c, [q, k, v, g, lse, out], [dq, ld], T),
        "dkv": lambda: fs._launch(dev, "dkv", c, [q, k, v, g, ld], [dk, dv], T),
    }
    result = {"variant": variant, "shape": list(shape), "adapter": dev.adapter_name}
    for name, fn in calls.items():
        try:
            fn()
            dev.synchronize()
            best = {}
            for _ in range(3):    # the least of three, each: the clock moved between runs at times
                for n in (reps, 2 * reps):
                    t0 = time.perf_counter()
                    for _ in range(n):
                        fn()
                    dev.synchronize()
                    best[n] = min(best.get(n, 1e9), time.perf_counter() - t0)
            result[name + "_us"] = round((best[2 * reps] - best[reps]) / reps * 1e6, 2)
        except Exception as exc:  # noqa: BLE001 - reported per kernel
            result[name + "_error"] = f"{type(exc).__name__}: {exc}"[:500]
    return result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=VARIANTS)
    ap.add_argument("--shape", default="64,6,256,64")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE: one more variant with this setting")
    args = ap.parse_args()
    shape = tuple(int(x) for x in args.shape.split(","))
    if args.variant:
        print(json.dumps(run_one(args.variant, shape, args.reps)), flush=True)
        return 0
    runs = [(v, {}) for v in VARIANTS] + [("base", dict([e.split("=", 1)])) for e in args.env]
    for variant, extra in runs:
        cmd = [sys.executable, __file__, "--variant", variant, "--shape", args.shape, "--reps", str(args.reps)]
        try:
            p = subprocess.run(cmd, env={**os.environ, **extra}, capture_output=True, text=True, timeout=120)
            line = (p.stdout.strip().splitlines() or [""])[-1]
            row = json.loads(line) if line.startswith("{") else {"variant": variant, "rc": p.returncode,
                                                                   "stderr": p.stderr[-800:]}
        except subprocess.TimeoutExpired:
            row = {"variant": variant, "error": "timeout"}
        row["env"] = extra
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
