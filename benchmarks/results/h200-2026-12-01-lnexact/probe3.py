"""Layer norm 4096x4096 on the H200: the exact form with gamma/beta's presence baked in ("flags":
the (P.flags & 1/2) tests replaced by constants, so no branch guards their loads), and without the
two-reduction fallback ("nofb": its condition made true; diagnostic only, wrong for the rows that
need it). f16 r256x2vgw8 and f32 r256x4vgd / r128x8vg, with and without gamma/beta; best of 3."""
import re

import numpy as np

from anygpu.bench.suite import Peers
from anygpu.bench.timing import _keep_busy, time_anygpu
from anygpu.ops import Device
from anygpu.ops.row_gen import PARAM_FORMAT, RowConfig, generate

R = C = 4096


def flags_const(src: str, flags: int) -> str:
    src, k1 = re.subn(r"\(\(P\.flags & 1u\) != 0u\)", "true" if flags & 1 else "false", src)
    src, k2 = re.subn(r"\(\(P\.flags & 2u\) != 0u\)", "true" if flags & 2 else "false", src)
    assert k1 and k2, (k1, k2)
    return src


def no_fallback(src: str) -> str:
    src, k = re.subn(r"if \(spread > 8e-28 && spread < 3e38 && variance >= spread \* 0\.00390625\)", "if (true)", src)
    assert k == 1
    return src


def main():
    dev = Device()
    peers = Peers()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((R, C)) * 3).astype(np.float32)
    g, b = rng.standard_normal(C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    bufs = {"f16": [dev.upload(a.astype(np.float16), "f16") for a in (x, g, b)], "f32": [dev.upload(a) for a in (x, g, b)]}
    cases = []
    for dtype, label in (("f16", "r256x2vgw8"), ("f32", "r256x4vgd"), ("f32", "r128x8vg")):
        exact = generate("layer_norm", RowConfig.parse(label), dtype, cols=C)
        for flags in (3, 0):
            cases += [(dtype, label, flags, "exact", exact), (dtype, label, flags, "flags", flags_const(exact, flags)),
                      (dtype, label, flags, "nofb", no_fallback(exact)),
                      (dtype, label, flags, "flags+nofb", no_fallback(flags_const(exact, flags)))]
    best, ref = {}, {}
    for rep in range(3):
        for dtype, label, flags, name, src in cases:
            kernel = dev.kernel(f"ln[{label} {name}]", src, 3, 2, PARAM_FORMAT)
            xb, gb, bb = bufs[dtype]

            def run():
                y, stats = dev.empty(R * C, dtype), dev.empty(2 * R)
                dev.launch(kernel, [xb, gb, bb], [y, stats], (R, C, 1e-5, flags), dev.grid(R))
                return y
            got = dev.read(run()).astype(np.float32)
            key = (dtype, label, flags)
            ref.setdefault(key, got)
            diff = float(np.abs(got - ref[key]).max())
            _keep_busy(dev, run, 0.3)
            s = time_anygpu(dev, run, 0.1)
            k = f"{dtype} {label} {'affine' if flags else 'plain'} {name}"
            best[k] = min(best.get(k, 1), s)
            print(f"rep {rep} {k:36s} {s * 1e6:7.2f} us  max diff to exact {diff:.3g}", flush=True)
    print("\nbest of 3 (us)")
    for k, s in best.items():
        print(f"{k:36s} {s * 1e6:7.2f}")


if __name__ == "__main__":
    main()
