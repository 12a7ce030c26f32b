"""(Ran on the reload form of the fallback since reverted: it set row_gen.RELOADING_FORMS, no longer in the code.)
Layer norm 4096x4096 on the H200: the two-reduction fallback reading the row again
(row_gen.RELOADING_FORMS) against keeping it in the common path's registers, exact forms,
with and without gamma/beta, best of 3."""
import numpy as np

from anygpu.bench.suite import Peers
from anygpu.bench.timing import _keep_busy, time_anygpu
from anygpu.ops import Device, row_gen
from anygpu.ops.row_gen import PARAM_FORMAT, RowConfig, generate

R = C = 4096


def source(dtype: str, label: str, reload: bool) -> str:
    config = RowConfig.parse(label)
    row_gen.RELOADING_FORMS = (config.form,) if reload else ()
    generate.cache_clear()
    return generate("layer_norm", config, dtype, cols=C)


def main():
    dev = Device()
    Peers()
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((R, C)) * 3).astype(np.float32)
    x[7] = 0.5  # one constant row: the fallback runs somewhere
    g, b = rng.standard_normal(C).astype(np.float32), rng.standard_normal(C).astype(np.float32)
    bufs = {"f16": [dev.upload(a.astype(np.float16), "f16") for a in (x, g, b)], "f32": [dev.upload(a) for a in (x, g, b)]}
    cases = [(d, lab, r, source(d, lab, r)) for d, lab in (("f16", "r256x2vgw8"), ("f16", "r128x4vgw8"),
                                                           ("f32", "r256x4vgd"), ("f32", "r128x8vg"))
             for r in (False, True)]
    best, ref = {}, {}
    for rep in range(3):
        for flags in (3, 0):
            for dtype, label, reload, src in cases:
                kernel = dev.kernel(f"ln[{label} {reload}]", src, 3, 2, PARAM_FORMAT)
                xb, gb, bb = bufs[dtype]

                def run():
                    y, stats = dev.empty(R * C, dtype), dev.empty(2 * R)
                    dev.launch(kernel, [xb, gb, bb], [y, stats], (R, C, 1e-5, flags), dev.grid(R))
                    return y
                got = dev.read(run()).astype(np.float32)
                key = (dtype, label, flags)
                ref.setdefault(key, got)
                same = bool(np.array_equal(got, ref[key], equal_nan=True))
                _keep_busy(dev, run, 0.3)
                s = time_anygpu(dev, run, 0.1)
                k = f"{dtype} {label} {'affine' if flags else 'plain'} {'reload' if reload else 'registers'}"
                best[k] = min(best.get(k, 1), s)
                print(f"rep {rep} {k:40s} {s * 1e6:7.2f} us  same as registers: {same}", flush=True)
    print("\nbest of 3 (us)")
    for k, s in best.items():
        print(f"{k:40s} {s * 1e6:7.2f}")


if __name__ == "__main__":
    main()
