"""f16 layer norm 4096x4096, r256x2vgw8 exact form: what do the affine step's 1-1.6 us pay for?

Diagnostic variants of the generated kernel, launched directly (best of 3, GPU timestamps):
exact (today's, flags 3), plain (no gamma/beta, flags 0), gamma only (flags 1), beta only (flags 2),
bcast (every thread reads gamma/beta word 0: the same loads and arithmetic, no L1 traffic beyond one
line; wrong values, timing only), fma (the output as fma(x - pivot, rstd, -moved * rstd) and
fma(o, gamma, beta) in one branch: 2 ops an element instead of 5). f32 r256x4vgd exact beside."""
import re

import numpy as np

from anygpu.bench.suite import Peers
from anygpu.bench.timing import _keep_busy, time_anygpu
from anygpu.ops import Device
from anygpu.ops.row_gen import PARAM_FORMAT, RowConfig, generate

R = C = 4096


def bcast(src: str) -> str:
    out, k = re.subn(r"(gamma|beta)\[i(\d)\]", r"\1[0u]", src)
    assert k == 4
    return out


def fma_form(src: str) -> str:
    for u in (0, 1):
        block = re.search(rf"    if \(ok{u}\) \{{\n        var o0 = .*?\n    \}}\n", src, re.S).group(0)
        new = (f"    if (ok{u}) {{\n"
               f"        let g = gamma[i{u}];\n        let b = beta[i{u}];\n"
               f"        let o0 = fma(fma(x{u}a - vec4<f32>(pivot), vec4<f32>(rstd), vec4<f32>(-moved * rstd)), "
               f"vec4<f32>(unpack2x16float(g.x), unpack2x16float(g.y)), vec4<f32>(unpack2x16float(b.x), unpack2x16float(b.y)));\n"
               f"        let o1 = fma(fma(x{u}b - vec4<f32>(pivot), vec4<f32>(rstd), vec4<f32>(-moved * rstd)), "
               f"vec4<f32>(unpack2x16float(g.z), unpack2x16float(g.w)), vec4<f32>(unpack2x16float(b.z), unpack2x16float(b.w)));\n"
               f"        y[base + i{u}] = vec4<u32>(pack2x16float(o0.xy), pack2x16float(o0.zw), pack2x16float(o1.xy), "
               f"pack2x16float(o1.zw));\n    }}\n")
        src = src.replace(block, new)
    return src


def main():
    dev = Device()
    peers = Peers()
    torch = peers.torch
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((R, C)) * 3).astype(np.float16)
    gamma = rng.standard_normal(C).astype(np.float16)
    beta = rng.standard_normal(C).astype(np.float16)
    xb, gb, bb = dev.upload(x, "f16"), dev.upload(gamma, "f16"), dev.upload(beta, "f16")
    g32, b32 = dev.upload(gamma.astype(np.float32)), dev.upload(beta.astype(np.float32))
    x32 = dev.upload(x.astype(np.float32))
    exact = generate("layer_norm", RowConfig.parse("r256x2vgw8"), "f16", cols=C)
    variants = {"exact": (exact, 3), "plain": (exact, 0), "gamma only": (exact, 1), "beta only": (exact, 2),
                "bcast": (bcast(exact), 3), "fma": (fma_form(exact), 3),
                "f32 exact": (generate("layer_norm", RowConfig.parse("r256x4vgd"), "f32", cols=C), 3)}
    want = torch.nn.functional.layer_norm(peers.tensor(x).float(), (C,), peers.tensor(gamma).float(),
                                          peers.tensor(beta).float()).half().float().cpu().numpy()
    best = {}
    for rep in range(3):
        for name, (src, flags) in variants.items():
            kernel = dev.kernel(f"layer_norm[{name}]", src, 3, 2, PARAM_FORMAT)
            is32 = name.startswith("f32")

            def run():
                y, stats = dev.empty(R * C, "f32" if is32 else "f16"), dev.empty(2 * R)
                dev.launch(kernel, [x32 if is32 else xb, g32 if is32 else gb, b32 if is32 else bb], [y, stats],
                           (R, C, 1e-5, flags), dev.grid(R))
                return y
            got = dev.read(run()).astype(np.float32).reshape(R, C)
            err = float(np.abs(got - want).max()) if flags == 3 else float("nan")
            _keep_busy(dev, run, 0.3)
            s = time_anygpu(dev, run, 0.1)
            best[name] = min(best.get(name, 1), s)
            print(f"rep {rep} {name:10s} {s * 1e6:7.2f} us  max |y - torch f32->f16| {err:.3g}", flush=True)
    print("\nbest of 3 (us), f32 exact / this:")
    for name, s in best.items():
        print(f"{name:10s} {s * 1e6:7.2f}  {best['f32 exact'] / s:.3f}")


if __name__ == "__main__":
    main()
