"""Sustained FMA throughput of WGSL compute kernels: the ceiling any anygpu kernel works under.

    python3 benchmarks/fma_peak.py [--quick] [--json FILE] [--ilp 1,2,4,8,16] [--widths 1,4]
                                   [--forms fma,muladd] [--wg 64,128,256] [--no-f16] [--no-cuda]

Each kernel does nothing but multiply-adds in registers: ILP independent accumulators of
vecW<T> (W = 1 scalar, 4 vec4), each updated `acc = fma(acc, m, c)` (form "fma") or
`acc = acc * m + c` (form "muladd", which the driver may or may not contract into one
fused instruction), BODY scalar multiply-adds per loop iteration (fully unrolled
statements), ITERS iterations. m, c, the loop count and the lanes' start values come from
the uniform parameters at run time, so no compiler can fold the chain; every invocation
writes the sum of its accumulators to the output buffer, so none of it is dead code.

Each variant is first launched with a few iterations and the general parameters of its
timed run, and its output compared with the same chain computed in NumPy (fused: the f32 /
f16 rounding of the exact product plus addend; unfused: product and sum rounded
separately); only then timed. Timed launches fill the GPU many times over (a multiple of an
H200's 132 SMs x 2048 resident threads), GPU timestamps, median of several rounds, after a
warm-up that brings the clocks up. TFLOP/s count 2 flops per multiply-add.

Also, with --trusted (default on): the best f32 variants again as trusted shader modules
(runtime/shaders.py: no runtime checks; nothing to check in registers, so this shows the
cost of naga's loop guard). f16 (`enable f16;`, where the adapter has shader-f16): packed
vec2/vec4<f16> chains. CUDA (where torch has a CUDA device): the same chain as an NVRTC
kernel through torch's jiterator, for the hardware's rate beside WGSL's at the same clocks.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

import anygpu as ag
from anygpu.bench.timing import time_anygpu

LANES = 64          # the distinct start values: lane i of every group of 64 invocations starts alike
SEED = 0.125        # start value of accumulator j, component k, lane i: i * SEED + (j * W + k)
# The timed runs' parameters: m and c exact in f16 too, so one set checks every dtype.
MUL = {"f32": float(np.float32(0.9999)), "f16": 1.0 - 2.0 ** -10}
ADD = {"f32": float(np.float32(0.001234)), "f16": 2.0 ** -7}
H200_THREADS = 132 * 2048   # H200: 132 SMs, at most 2048 resident invocations each


@dataclass(frozen=True)
class Variant:
    dtype: str = "f32"     # f32 | f16
    width: int = 1         # 1 scalar, 2 vec2, 4 vec4
    ilp: int = 1           # independent accumulators
    form: str = "fma"      # fma: fma(a, m, c); muladd: a * m + c
    wg: int = 256          # workgroup size
    body: int = 256        # scalar multiply-adds per loop iteration
    trusted: bool = False  # a trusted (no runtime checks) shader module

    @property
    def name(self) -> str:
        vec = f"vec{self.width}<{self.dtype}>" if self.width > 1 else self.dtype
        return f"{vec} ilp{self.ilp} {self.form} wg{self.wg}" + (" trusted" if self.trusted else "")

    @property
    def unroll(self) -> int:
        """Rounds over the accumulators per loop iteration."""
        return max(1, self.body // (self.ilp * self.width))

    @property
    def fmas_per_iter(self) -> int:
        return self.unroll * self.ilp * self.width


def wgsl(v: Variant) -> str:
    """The kernel of variant `v` (bindings as runtime.Device lays them out: 0 params, 1 output)."""
    t = v.dtype if v.width == 1 else f"vec{v.width}<{v.dtype}>"
    lines = []
    if v.trusted:
        lines.append("//! trusted")
    if v.dtype == "f16":
        lines.append("enable f16;")
    lines += [
        "struct Params { iters: u32, seed: f32, mul: f32, add: f32 }",
        "@group(0) @binding(0) var<uniform> p: Params;",
        "@group(0) @binding(1) var<storage, read_write> out: array<f32>;",
        "",
        f"@compute @workgroup_size({v.wg})",
        "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
        f"    let idx = gid.x + gid.y * nwg.x * {v.wg}u;",
        "    if (idx >= arrayLength(&out)) { return; }",
        f"    let base = f32(idx & {LANES - 1}u) * p.seed;",
        f"    let m = {t}({v.dtype}(p.mul));",
        f"    let c = {t}({v.dtype}(p.add));",
    ]
    for j in range(v.ilp):
        comps = [f"{v.dtype}(base + {float(j * v.width + k)})" for k in range(v.width)]
        lines.append(f"    var a{j} = {t}({', '.join(comps)});")
    lines.append("    for (var i = 0u; i < p.iters; i++) {")
    for _ in range(v.unroll):
        for j in range(v.ilp):
            step = f"fma(a{j}, m, c)" if v.form == "fma" else f"a{j} * m + c"
            lines.append(f"        a{j} = {step};")
    lines.append("    }")
    lines.append("    var s = 0.0;")
    for j in range(v.ilp):
        for k in range(v.width):
            comp = f"a{j}" if v.width == 1 else f"a{j}.{'xyzw'[k]}"
            lines.append(f"    s = s + f32({comp});")
    lines.append("    out[idx] = s;")
    lines.append("}")
    return "\n".join(lines) + "\n"


def expected(v: Variant, iters: int, mul: float, add: float, fused: bool) -> np.ndarray:
    """The value lane i (0..LANES-1) writes, computed in NumPy: the kernel's chain step by step.

    fused: each step is the exact product plus addend rounded once (through float64, which
    holds an f32 or f16 product exactly); else the product and the sum are rounded apart."""
    host = np.float16 if v.dtype == "f16" else np.float32
    m, c = host(mul), host(add)
    base = np.arange(LANES, dtype=np.float32) * np.float32(SEED)
    offsets = np.arange(v.ilp * v.width, dtype=np.float32)
    acc = (base[:, None] + offsets[None, :]).astype(host)   # columns: accumulator j, component k
    for _ in range(iters * v.unroll):
        if fused:
            acc = (acc.astype(np.float64) * np.float64(m) + np.float64(c)).astype(host)
        else:
            acc = (acc * m).astype(host) + c
    s = np.zeros(LANES, np.float32)
    for col in range(acc.shape[1]):
        s = s + acc[:, col].astype(np.float32)
    return s


class Probe:
    """Compiles, checks and times variants on one device."""

    def __init__(self, dev, threads: int, iters: int, budget: float, check_iters: int = 3):
        self.dev = dev
        self.threads = threads
        self.iters = iters
        self.budget = budget
        self.check_iters = check_iters
        self.out = dev.empty(threads)
        self.check_out = dev.empty(4 * LANES)

    def kernel(self, v: Variant):
        return self.dev.kernel(f"fma_peak {v.name}", wgsl(v), 0, 1, "Ifff")

    def launch(self, v: Variant, out, iters: int, mul: float, add: float) -> None:
        kernel = self.kernel(v)
        groups = -(-out.len // v.wg)
        self.dev.launch(kernel, [], [out], (iters, SEED, mul, add), self.dev.grid(groups))

    def check(self, v: Variant, mul: float, add: float, iters: int | None = None, out=None) -> dict:
        """Run `v` for a few iterations and compare every output with NumPy's chain."""
        iters = self.check_iters if iters is None else iters
        out = self.check_out if out is None else out
        self.launch(v, out, iters, mul, add)
        got = self.dev.read(out).astype(np.float32)
        lanes = np.arange(got.size) % LANES
        result = {"check_iters": iters}
        for fused in (True, False):
            want = expected(v, iters, mul, add, fused)[lanes]
            if np.array_equal(got, want):
                result["check"] = "fused" if fused else "unfused"
                result["max_rel_err"] = 0.0
                return result
        want = expected(v, iters, mul, add, True)[lanes]
        err = float(np.max(np.abs(got.astype(np.float64) - want) / np.maximum(np.abs(want), 1e-30)))
        tolerance = 1e-2 if v.dtype == "f16" else 1e-5   # double rounding in the fused emulation
        result["check"] = "close" if err < tolerance else "WRONG"
        result["max_rel_err"] = err
        return result

    def time(self, v: Variant) -> dict:
        mul, add = MUL[v.dtype], ADD[v.dtype]
        result = {"variant": v.name, **{k: getattr(v, k) for k in v.__dataclass_fields__}}
        try:
            result.update(self.check(v, mul, add))
            if result["check"] == "WRONG":
                return result
            seconds = time_anygpu(self.dev, lambda: self.launch(v, self.out, self.iters, mul, add),
                                  budget_s=self.budget, rounds=5)
        except Exception as exc:  # report the variant and go on
            result["error"] = " ".join(str(exc).split())[:200]
            return result
        fmas = float(self.threads) * self.iters * v.fmas_per_iter
        result.update(seconds=seconds, fmas=fmas, tflops=2.0 * fmas / seconds / 1e12)
        return result

    def warm_up(self, seconds: float) -> None:
        """Keep the GPU busy for about `seconds` so that clocks have risen before timing."""
        v = Variant(ilp=8)
        self.launch(v, self.out, self.iters, MUL["f32"], ADD["f32"])
        self.dev.synchronize()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            for _ in range(4):
                self.launch(v, self.out, self.iters, MUL["f32"], ADD["f32"])
            self.dev.synchronize()


CUDA_CHAIN = """
template <typename T> T fma_chain(T x, T m, T c) {{
    {decls}
    for (int i = 0; i < {iters}; ++i) {{
        #pragma unroll
        for (int u = 0; u < {unroll}; ++u) {{
            {steps}
        }}
    }}
    return {total};
}}
"""


def cuda_peak(torch, iters: int, budget: float, ilp: int = 8, unroll: int = 32) -> dict:
    """The same chain (f32 fma, `ilp` accumulators) as a CUDA kernel compiled by NVRTC through
    torch's jiterator; CUDA events. Checked against NumPy's fused chain at one iteration."""
    from anygpu.bench.timing import time_torch
    jit = torch.cuda.jiterator._create_jit_fn

    def source(n_iters):
        decls = " ".join(f"T a{j} = x + T({j});" for j in range(ilp))
        steps = " ".join(f"a{j} = fmaf(a{j}, m, c);" for j in range(ilp))
        total = " + ".join(f"a{j}" for j in range(ilp))
        return CUDA_CHAIN.format(decls=decls, iters=n_iters, unroll=unroll, steps=steps, total=total)

    mul, add = MUL["f32"], ADD["f32"]
    x_host = (np.arange(4 * LANES) % LANES).astype(np.float32) * np.float32(SEED)
    short = jit(source(1), m=mul, c=add)
    got = short(torch.from_numpy(x_host).cuda()).cpu().numpy()
    acc = x_host[:, None] + np.arange(ilp, dtype=np.float32)[None, :]
    for _ in range(unroll):
        acc = (acc.astype(np.float64) * np.float64(np.float32(mul)) + np.float64(np.float32(add))).astype(np.float32)
    want = acc[:, 0]
    for j in range(1, ilp):
        want = want + acc[:, j]
    err = float(np.max(np.abs(got - want) / np.abs(want)))
    n = 32 * H200_THREADS
    x = torch.rand(n, device="cuda")
    fn = jit(source(iters), m=mul, c=add)
    seconds = time_torch(torch, "cuda", lambda: fn(x), budget_s=budget, rounds=5)
    fmas = float(n) * iters * unroll * ilp
    return {"variant": f"CUDA f32 ilp{ilp} fmaf (NVRTC, jiterator)", "seconds": seconds, "fmas": fmas,
            "tflops": 2.0 * fmas / seconds / 1e12, "check": "close" if err < 1e-5 else "WRONG",
            "max_rel_err": err}


def show(r: dict) -> None:
    if "tflops" in r:
        print(f"  {r['variant']:<40} {r['seconds'] * 1e3:9.3f} ms {r['tflops']:9.3f} TFLOP/s  check {r['check']}")
    else:
        print(f"  {r['variant']:<40} {r.get('error') or 'check ' + r['check']}")
    sys.stdout.flush()


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes (software drivers, CI)")
    parser.add_argument("--json", metavar="FILE")
    parser.add_argument("--ilp", default="1,2,4,8,16")
    parser.add_argument("--widths", default="1,4")
    parser.add_argument("--forms", default="fma,muladd")
    parser.add_argument("--wg", default="64,128,256")
    parser.add_argument("--body", type=int, default=None, help="scalar multiply-adds per loop iteration")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds per measurement")
    parser.add_argument("--no-trusted", action="store_true")
    parser.add_argument("--no-f16", action="store_true")
    parser.add_argument("--no-cuda", action="store_true")
    args = parser.parse_args(argv)
    dev = ag.gpu()
    quick = args.quick
    threads = 4 * 256 if quick else 16 * H200_THREADS
    body = args.body or (32 if quick else 256)
    iters = 4 if quick else 65536 // body
    print(f"{dev.adapter_name} ({dev.backend}, driver {dev.driver}); {threads} invocations x {iters} iterations "
          f"x {body} multiply-adds")
    probe = Probe(dev, threads, iters, args.budget)
    report = {"adapter": dev.adapter_name, "driver": dev.driver, "backend": dev.backend,
              "date": time.strftime("%Y-%m-%dT%H:%M:%S"), "threads": threads, "iters": iters, "body": body,
              "results": []}
    results = report["results"]
    if not quick:
        probe.warm_up(1.0)
    start = time.perf_counter()
    print("f32:")
    for wg in ints(args.wg):
        for width in ints(args.widths):
            for ilp in ints(args.ilp):
                for form in args.forms.split(","):
                    results.append(probe.time(Variant("f32", width, ilp, form, wg, body)))
                    show(results[-1])
    timed = [r for r in results if "tflops" in r]
    if timed and not args.no_trusted:
        print("trusted modules (the three fastest f32 variants):")
        for r in sorted(timed, key=lambda r: -r["tflops"])[:3]:
            v = Variant("f32", r["width"], r["ilp"], r["form"], r["wg"], body, True)
            results.append(probe.time(v))
            show(results[-1])
    if dev.supports("f16") and not args.no_f16:
        print("f16:")
        for width in (2, 4):
            for ilp in (4, 8) if quick else (2, 4, 8, 16):
                results.append(probe.time(Variant("f16", width, ilp, "fma", 256, body)))
                show(results[-1])
    if not args.no_cuda and not quick:
        try:
            import torch
            if torch.cuda.is_available():
                print("CUDA (same chain, NVRTC through torch's jiterator):")
                results.append(cuda_peak(torch, iters=256, budget=args.budget))
                show(results[-1])
        except Exception as exc:  # a torch without CUDA, NVRTC or jiterator: say so
            results.append({"variant": "CUDA f32 (jiterator)", "error": " ".join(str(exc).split())[:300]})
            show(results[-1])
    report["seconds"] = time.perf_counter() - start
    best = {}
    for dtype in ("f32", "f16"):
        rows = [r for r in results if r.get("dtype") == dtype and "tflops" in r]
        if rows:
            best[dtype] = max(rows, key=lambda r: r["tflops"])
            print(f"best {dtype}: {best[dtype]['variant']} {best[dtype]['tflops']:.2f} TFLOP/s")
    f32 = [r["tflops"] for r in results if r.get("dtype") == "f32" and "tflops" in r]
    if f32:
        print(f"f32 variants: median {statistics.median(f32):.2f} TFLOP/s over {len(f32)}")
    report["best"] = {k: {"variant": r["variant"], "tflops": r["tflops"]} for k, r in best.items()}
    wrong = [r["variant"] for r in results if r.get("check") == "WRONG" or "error" in r]
    report["wrong_or_failed"] = wrong
    if wrong:
        print("wrong or failed:", ", ".join(wrong))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 1 if any(r.get("check") == "WRONG" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
