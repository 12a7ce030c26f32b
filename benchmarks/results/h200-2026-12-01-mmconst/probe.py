"""fp32 matmul 4096^3 on the H200: the tuned whole-tile kernels with the shape's uniforms baked in.

For each config: the generated source as launched today ("uniform"), the same with every
Params field (m, n, k, strides, batch strides, alpha) a constant ("const"), and with only
the k-loop bound a constant ("k only"). Outputs must match the uniform kernel bit for bit.
torch CUDA (TF32 off) in the same process."""
import re
import sys

import numpy as np

from anygpu.bench.suite import Peers
from anygpu.bench.timing import _keep_busy, time_anygpu
from anygpu.ops import Device
from anygpu.ops.matmul_gen import PARAM_FORMAT, MatmulConfig, Problem, Variant, generate

N = int(sys.argv[1]) if len(sys.argv) > 1 else 4096
CONFIGS = sys.argv[2].split(",") if len(sys.argv) > 2 else ["128x256x16_8x16_v4p", "256x128x16_16x8_v4p",
                                                              "256x128x16_8x16_v4p"]


def bake(src: str, problem: Problem, which: str) -> str:
    names = ("m", "n", "k", "batch", "a_rs", "a_cs", "b_rs", "b_cs", "a_bs", "b_bs", "c_bs", "alpha_bits")
    values = dict(zip(names, problem.params()))
    if which == "k only":
        return re.sub(r"\bP\.k\b", f"{values['k']}u", src)
    src = src.replace("bitcast<f32>(P.alpha_bits)", "1.0")
    for name in names:
        src = re.sub(rf"\bP\.{name}\b", f"{values[name]}u", src)
    return src


def main():
    dev = Device()
    peers = Peers()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((N, N)).astype(np.float32)
    b = rng.standard_normal((N, N)).astype(np.float32)
    ab, bb = dev.upload(a), dev.upload(b)
    problem = Problem(1, N, N, N)
    ta, tb = peers.tensor(a), peers.tensor(b)
    flops = 2.0 * N ** 3
    best = {}
    for rep in range(3):
        ts = peers.time(lambda: ta @ tb, 0.2)
        best["torch"] = min(best.get("torch", 1), ts)
        print(f"rep {rep} torch {flops / ts / 1e12:6.2f} TFLOP/s", flush=True)
        for label in CONFIGS:
            config = MatmulConfig.parse(label)
            src = generate(config, Variant.of(config, N, N, N))
            ref = None
            for which in ("uniform", "const", "k only"):
                s_src = src if which == "uniform" else bake(src, problem, which)
                kernel = dev.kernel(f"mm[{label} {which}]", s_src, 2, 1, PARAM_FORMAT)

                def run():
                    out = dev.empty(N * N)
                    dev.launch(kernel, (ab, bb), (out,), problem.params(), (N // config.tile_n, N // config.tile_m, 1))
                    return out
                got = dev.read(run())
                ref = got if ref is None else ref
                same = bool(np.array_equal(got, ref))
                _keep_busy(dev, run, 0.3)
                s = time_anygpu(dev, run, 0.2)
                key = f"{label} {which}"
                best[key] = min(best.get(key, 1), s)
                print(f"rep {rep} {key:32s} {flops / s / 1e12:6.2f} TFLOP/s  {best['torch'] / s:.3f} of torch"
                      f"  same as uniform: {same}", flush=True)
    print("\nbest of 3: TFLOP/s, ratio to torch's best")
    for key, s in best.items():
        print(f"{key:32s} {flops / s / 1e12:6.2f}  {best['torch'] / s:.3f}")


if __name__ == "__main__":
    main()
