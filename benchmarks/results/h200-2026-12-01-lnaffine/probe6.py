"""f16 and f32 layer norm 4096x4096: the row kernels before (old) and after (new3, new0) the fused output
step (y = fma(fma(x - pivot, rstd, -moved * rstd), gamma, beta)) with gamma/beta compiled in (new3: both;
new0: neither), their WGSL saved beside this script in wgsl/ (made by ops/row_gen.py at the two commits,
rows of exactly 4096: the exact forms). Launched directly, old with gamma/beta (flags 3) and without (flags
0), new3 with flags 3, new0 with flags 0; best of 3 rounds, GPU timestamps; errors against torch's f32
layer norm rounded to the stored type. (A first run measured the fused step with gamma/beta loaded under
the flags, `var g = 1; if (flags & 1) { g = gamma[i]; }`: slower, probe6-conditional.log.)"""
import pathlib

import numpy as np

from anygpu.bench.suite import Peers
from anygpu.bench.timing import _keep_busy, time_anygpu
from anygpu.ops import Device
from anygpu.ops.row_gen import PARAM_FORMAT

R = C = 4096
HERE = pathlib.Path(__file__).parent / "wgsl"


def main():
    dev = Device()
    peers = Peers()
    torch = peers.torch
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((R, C)) * 3).astype(np.float16)
    gamma = rng.standard_normal(C).astype(np.float16)
    beta = rng.standard_normal(C).astype(np.float16)
    bufs = {"f16": [dev.upload(a, "f16") for a in (x, gamma, beta)],
            "f32": [dev.upload(a.astype(np.float32)) for a in (x, gamma, beta)]}
    tx, tg, tb = (peers.tensor(a).float() for a in (x, gamma, beta))
    want = torch.nn.functional.layer_norm(tx, (C,), tg, tb).cpu().numpy()
    best = {}
    files = sorted(HERE.glob("*.wgsl"))
    for rep in range(3):
        for path in files:
            dtype = path.name[:3]
            kernel = dev.kernel(path.stem, path.read_text(), 3, 2, PARAM_FORMAT)
            tag = path.stem.rsplit("-", 1)[1]
            for flags in ((3, 0) if tag == "old" else (int(tag[-1]),)):
                def run():
                    y, stats = dev.empty(R * C, dtype), dev.empty(2 * R)
                    dev.launch(kernel, bufs[dtype], [y, stats], (R, C, 1e-5, flags), dev.grid(R))
                    return y
                got = dev.read(run()).astype(np.float32).reshape(R, C)
                ref = want.astype(np.float16).astype(np.float32) if dtype == "f16" else want
                err = float(np.abs(got - ref).max()) if flags == 3 else float("nan")
                _keep_busy(dev, run, 0.2)
                s = time_anygpu(dev, run, 0.1)
                key = f"{path.stem} flags {flags}"
                best[key] = min(best.get(key, 1), s)
                print(f"rep {rep} {key:28s} {s * 1e6:7.2f} us  max err {err:.3g}", flush=True)
    print("\nbest of 3 (us):")
    for key, s in best.items():
        print(f"{key:28s} {s * 1e6:7.2f}")


if __name__ == "__main__":
    main()
