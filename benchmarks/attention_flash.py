"""Flash attention (ops/flash_attention.py, ops/flash_sgmat.py) against today's composed SDPA
and torch's SDPA (fp16, CUDA) at nanoGPT's attention shape, forward and forward+backward,
with values checked against torch. Prints one JSON line; a variant that fails is reported
with its error, never a crash.

    ANYGPU_RUNTIME=dawn python benchmarks/attention_flash.py [--shape B,H,T,D] [--reps N]
    python benchmarks/attention_flash.py --null    # compile the matrix kernels with Tint (Dawn's
                                                   # Null backend, no GPU); exit 1 on a failure

Variants (rows): composed (ANYGPU_FLASH=0), portable (ANYGPU_FLASH=portable), matrix
(ANYGPU_FLASH=matrix: only where the device has f16 subgroup matrices), each in f16 and f32
(the matrix one in f16 only); torch_fp16 and torch_fp32 on CUDA where torch sees a GPU.
Times are ms per call: (time of 2n calls - time of n calls) / n, each ended by one read.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def _flash_sgmat():
    """anygpu.ops.flash_sgmat without importing anygpu (as sgmat_sweep.py does for sgmat)."""
    import importlib
    import types
    src = os.path.join(HERE, "..", "src", "anygpu")
    for name, path in (("anygpu", src), ("anygpu.ops", os.path.join(src, "ops"))):
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__path__ = [path]
            sys.modules[name] = mod
    return importlib.import_module("anygpu.ops.flash_sgmat")


def null_check() -> int:
    """Compile every matrix kernel shape the routing can ask for with Tint on the Null backend."""
    fs = _flash_sgmat()
    sys.path.insert(0, HERE)
    from sgmat_sweep import Runner  # Dawn's Null device, as the sgmat check opens it
    runner = Runner(True)
    compiled, failed = [], {}
    for kind in fs.KINDS:
        for d, dv in ((16, 16), (32, 32), (64, 64), (80, 80), (128, 128), (64, 32)):
            for ns in (4, 2, 1):
                if fs.workgroup_bytes(kind, d, dv, ns) > 49152:
                    continue
                for causal, masked, dropout in ((False, False, False), (True, False, False), (False, True, True),
                                                (True, True, False)):
                    shape = fs.Shape(d, dv, ns, causal, masked, dropout)
                    name = f"{kind}_d{d}_v{dv}_ns{ns}_c{int(causal)}m{int(masked)}p{int(dropout)}"
                    _, err = runner.compile(fs.generate(kind, shape))
                    if err:
                        failed[name] = err[:2000]
                    else:
                        compiled.append(name)
    print(json.dumps({"compiled": compiled, "failed": failed}))
    return 1 if failed or not compiled else 0


def _time(fn, sync, reps: int) -> float:
    fn()
    sync()
    times = []
    for n in (reps, 2 * reps):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        times.append(time.perf_counter() - t0)
    return max(times[1] - times[0], 1e-9) / reps * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--null", action="store_true")
    ap.add_argument("--shape", default="64,6,256,64", help="B,H,T,D (nanoGPT: 64,6,256,64)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--no-causal", action="store_true")
    args = ap.parse_args()
    if args.null:
        return null_check()
    B, H, T, D = (int(x) for x in args.shape.split(","))
    causal = not args.no_causal
    result: dict = {"shape": [B, H, T, D], "causal": causal, "rows": {}, "errors": {}}
    rng = np.random.default_rng(0)
    q, k, v, g = (rng.standard_normal((B, H, T, D)).astype(np.float32) for _ in range(4))
    ref = {}
    try:
        import torch
        import torch.nn.functional as TF
        cuda = torch.cuda.is_available()
        result["torch"] = torch.__version__ + (" cuda" if cuda else " cpu")
        dev_t = "cuda" if cuda else "cpu"
        for name, dt in (("fp16", torch.float16), ("fp32", torch.float32)):
            if not cuda and dt is torch.float16:
                continue
            tq, tk, tv = (torch.tensor(x, device=dev_t, dtype=dt, requires_grad=True) for x in (q, k, v))
            tg = torch.tensor(g, device=dev_t, dtype=dt)

            def fwd():
                return TF.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)

            def both():
                out = fwd()
                out.backward(tg)

            sync = torch.cuda.synchronize if cuda else (lambda: None)
            row = {"fwd_ms": _time(fwd, sync, args.reps), "fwd_bwd_ms": _time(both, sync, args.reps)}
            result["rows"][f"torch_{name}"] = row
        # values: float64 on the CPU
        tq, tk, tv = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (q, k, v))
        out = TF.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
        out.backward(torch.tensor(g, dtype=torch.float64))
        ref = {"out": out.detach().numpy(), "dq": tq.grad.numpy(), "dk": tk.grad.numpy(), "dv": tv.grad.numpy()}
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        result["errors"]["torch"] = f"{type(exc).__name__}: {exc}"

    import anygpu as ag
    import anygpu.nn.functional as F
    from anygpu.ops import flash_attention, gpu
    dev = gpu()
    result["adapter"] = dev.adapter_name
    result["runtime"] = os.environ.get("ANYGPU_RUNTIME", "auto")
    result["routing"] = {dt: flash_attention.variant(dev, dt, D, D, B * H) for dt in ("f16", "f32")}
    saved = os.environ.get("ANYGPU_FLASH")
    for setting in ("0", "portable", "matrix"):
        for dt in ("f16", "f32"):
            name = {"0": "composed", "portable": "portable", "matrix": "matrix"}[setting] + "_" + dt
            os.environ["ANYGPU_FLASH"] = setting
            try:
                if setting == "matrix" and flash_attention.variant(dev, dt, D, D, B * H) != "matrix":
                    continue
                dtype = ag.float16 if dt == "f16" else ag.float32
                aq, ak, av = (ag.tensor(x).to(dtype).requires_grad_() for x in (q, k, v))
                ag_g = ag.tensor(g).to(dtype)
                holder = {}

                def fwd():
                    holder["out"] = F.scaled_dot_product_attention(aq, ak, av, is_causal=causal)

                def both():
                    for t in (aq, ak, av):
                        t.grad = None
                    fwd()
                    holder["out"].backward(ag_g)

                def sync():
                    holder["out"].reshape(-1)[:1].numpy()

                row = {"fwd_ms": _time(fwd, sync, args.reps)}
                row["fwd_bwd_ms"] = _time(both, lambda: aq.grad.reshape(-1)[:1].numpy(), args.reps)
                if ref:
                    both()
                    got = {"out": holder["out"], "dq": aq.grad, "dk": ak.grad, "dv": av.grad}
                    for key, want in ref.items():
                        have = got[key].float().numpy().astype(np.float64)
                        scale = max(float(np.abs(want).max()), 1e-30)
                        row[f"{key}_max_rel_err"] = float(np.nanmax(np.abs(have - want)) / scale)
                        row[f"{key}_nan"] = int(np.isnan(have).sum())
                result["rows"][name] = row
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                result["errors"][name] = f"{type(exc).__name__}: {exc}"[:2000]
                result["errors"][name + "_trace"] = traceback.format_exc()[-1500:]
    if saved is None:
        os.environ.pop("ANYGPU_FLASH", None)
    else:
        os.environ["ANYGPU_FLASH"] = saved
    rows = result["rows"]
    ratios = {}
    for name, row in rows.items():
        for base in ("composed_f16", "torch_fp16"):
            if name != base and base in rows and not name.startswith("torch"):
                for key in ("fwd_ms", "fwd_bwd_ms"):
                    ratios[f"{name}/{base}:{key}"] = row[key] / rows[base][key]
    result["ratios"] = ratios
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
