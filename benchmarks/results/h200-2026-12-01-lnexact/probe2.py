"""f16 layer norm 4096x4096, r256x2vgw8 exact form: is the affine step's cost its f16->f32 conversions?

Variants of the generated kernel (launched directly): masked (the form before the exact one), exact
(today's), f32gb (gamma/beta read as f32: no conversions for them; diagnostic, 2x their bytes),
h16 (the affine step in packed f16 math: one conversion fewer per element, a second rounding;
diagnostic only), plain (no gamma/beta). f32 r256x4vgd exact beside, for the f16/f32 ratio."""
import re

import numpy as np

from anygpu.bench.suite import Peers
from anygpu.bench.timing import _keep_busy, time_anygpu
from anygpu.ops import Device
from anygpu.ops.row_gen import PARAM_FORMAT, RowConfig, generate

R = C = 4096


def f32gb(src: str) -> str:
    src = src.replace("var<storage, read> gamma: array<vec4<u32>>", "var<storage, read> gamma: array<vec4<f32>>")
    src = src.replace("var<storage, read> beta: array<vec4<u32>>", "var<storage, read> beta: array<vec4<f32>>")
    for u in (0, 1):
        for name, op in (("gamma", "*"), ("beta", "+")):
            pat = (rf"            let {name[0]} = {name}\[i{u}\];\n            o0 = o0 \{op} [^\n]*\n"
                   rf"            o1 = o1 \{op} [^\n]*\n")
            src, k = re.subn(pat, f"            o0 = o0 {op} {name}[2u * i{u}];\n"
                                  f"            o1 = o1 {op} {name}[2u * i{u} + 1u];\n", src)
            assert k == 1, (name, u)
    return src


def h16(src: str) -> str:
    # gamma, beta and y as vec4<f16> arrays (two per unit of 8 halves): naga 29 mistypes
    # bitcast<vec2<f16>>(u32), so the halves are addressed directly
    for name in ("gamma", "beta"):
        src = src.replace(f"var<storage, read> {name}: array<vec4<u32>>", f"var<storage, read> {name}: array<vec4<f16>>")
    src = src.replace("var<storage, read_write> y: array<vec4<u32>>", "var<storage, read_write> y: array<vec4<f16>>")
    for u in (0, 1):
        old = re.search(rf"        if \(\(P\.flags & 1u\) != 0u\) \{{\n            let g = gamma\[i{u}\];.*?"
                        rf"        y\[base \+ i{u}\] = [^\n]*\n", src, re.S).group(0)
        new = "".join(f"        y[2u * (base + i{u}) + {p}u] = fma(vec4<f16>(o{p}), gamma[2u * i{u} + {p}u], beta[2u * i{u} + {p}u]);\n"
                      for p in (0, 1))
        src = src.replace(old, new)
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
    cfg = RowConfig.parse("r256x2vgw8")
    exact = generate("layer_norm", cfg, "f16", cols=C)
    variants = {"masked": (generate("layer_norm", cfg, "f16"), gb, bb, 3), "exact": (exact, gb, bb, 3),
                "gb32": (f32gb(exact), g32, b32, 3), "h16": (h16(exact), gb, bb, 3), "plain": (exact, xb, xb, 0)}
    f32src = generate("layer_norm", RowConfig.parse("r256x4vgd"), "f32", cols=C)
    variants["f32 exact"] = (f32src, g32, b32, 3)
    variants["f32 masked"] = (generate("layer_norm", RowConfig.parse("r256x4vgd"), "f32"), g32, b32, 3)
    want = torch.nn.functional.layer_norm(peers.tensor(x).float(), (C,), peers.tensor(gamma).float(),
                                          peers.tensor(beta).float()).half().float().cpu().numpy()
    best = {}
    for rep in range(3):
        for name, (src, g, b, flags) in variants.items():
            kernel = dev.kernel(f"layer_norm[{name}]", src, 3, 2, PARAM_FORMAT)
            is32 = name.startswith("f32")
            dtype = "f32" if is32 else "f16"

            def run():
                y, stats = dev.empty(R * C, dtype), dev.empty(2 * R)
                dev.launch(kernel, [x32 if is32 else xb, g, b], [y, stats], (R, C, 1e-5, flags), dev.grid(R))
                return y
            got = dev.read(run()).astype(np.float32).reshape(R, C)
            err = float(np.abs(got - want).max()) if flags else 0.0
            _keep_busy(dev, run, 0.3)
            s = time_anygpu(dev, run, 0.1)
            best[name] = min(best.get(name, 1), s)
            print(f"rep {rep} {name:10s} {s * 1e6:7.2f} us  max |y - torch f32->f16| {err:.3g}", flush=True)
    print("\nbest of 3 (us), f32 exact / this:")
    for name, s in best.items():
        print(f"{name:10s} {s * 1e6:7.2f}  {best['f32 exact'] / s:.3f}")


if __name__ == "__main__":
    main()
