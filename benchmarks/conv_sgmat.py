"""Convolutions on matrix units (anygpu/ops/conv_sgmat.py) against the f32 kernels and torch.

    python benchmarks/conv_sgmat.py [--reps N] [--sweep] [--only NAME,...]   # on a GPU, Dawn
    python benchmarks/conv_sgmat.py --null                                   # compile-only

Times, for every conv layer shape of the digits CNN and the diffusion U-Net
(src/anygpu/train/stratagems.py digits_cnn, train/diffusion.py TinyUNet at the default
width 64, batch 32): anygpu's f32 kernels and its f16 matrix-unit kernels, forward and
forward+backward (input, weight and bias gradients), and torch fp16 (cudnn) in the same run.
Each variant's failure is recorded in its place, not fatal. Prints one line per layer and
one JSON line at the end (per layer: milliseconds per call; "model" sums each model's
layers times their counts). --sweep also times every conv_sgmat config per layer
(ANYGPU_CONV_SGMAT_CONFIG), to tune the size heuristic conv_sgmat.choose.

--null: Dawn's Null backend: Tint compiles every generated kernel (each config, kind and
layout, wide members with B packed and not) and nothing runs -- the only check of the WGSL
where no GPU has subgroup matrices.

Forms: the f16 rows use conv_sgmat.choose's shape in form ANYGPU_CONV_SGMAT_FORM (v_s by
default: wide tiles, one stage; plain, v, s: the others); ANYGPU_CONV_SGMAT_PACK_B=0 keeps
B's tile of single halves in wide members. Their effect on a GPU:

    for f in plain s v v_s; do ANYGPU_RUNTIME=dawn ANYGPU_CONV_SGMAT_FORM=$f \
        python benchmarks/conv_sgmat.py --json /tmp/conv_$f.json; done
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

# (model, name, count, batch, in_c, size, out_c, kernel, stride, padding)
LAYERS = [
    ("digits", "conv1 1-16 8x8", 1, 32, 1, 8, 16, 3, 1, 1),
    ("digits", "conv2 16-32 8x8", 1, 32, 16, 8, 32, 3, 1, 1),
    ("diffusion", "stem 3-64 32x32", 1, 32, 3, 32, 64, 3, 1, 1),
    ("diffusion", "64-64 32x32", 3, 32, 64, 32, 64, 3, 1, 1),
    ("diffusion", "down1 64-64 s2 32x32", 1, 32, 64, 32, 64, 3, 2, 1),
    ("diffusion", "64-128 16x16", 1, 32, 64, 16, 128, 3, 1, 1),
    ("diffusion", "skip 1x1 64-128 16x16", 1, 32, 64, 16, 128, 1, 1, 0),
    ("diffusion", "128-128 16x16", 2, 32, 128, 16, 128, 3, 1, 1),
    ("diffusion", "down2 128-128 s2 16x16", 1, 32, 128, 16, 128, 3, 2, 1),
    ("diffusion", "128-128 8x8", 2, 32, 128, 8, 128, 3, 1, 1),
    ("diffusion", "256-128 16x16", 1, 32, 256, 16, 128, 3, 1, 1),
    ("diffusion", "skip 1x1 256-128 16x16", 1, 32, 256, 16, 128, 1, 1, 0),
    ("diffusion", "192-64 32x32", 1, 32, 192, 32, 64, 3, 1, 1),
    ("diffusion", "skip 1x1 192-64 32x32", 1, 32, 192, 32, 64, 1, 1, 0),
    ("diffusion", "head 64-3 32x32", 1, 32, 64, 32, 3, 3, 1, 1),
]


# ----------------------------------------------------------------------------- --null

def null_compile() -> int:
    """Compile every kernel conv_sgmat generates with Tint on Dawn's Null backend."""
    spec = importlib.util.spec_from_file_location("sgmat_sweep", os.path.join(HERE, "sgmat_sweep.py"))
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    from anygpu.ops import conv_sgmat
    runner = sweep.Runner(null=True)
    members = conv_sgmat.candidates(runner.configs, runner.sg, 1024, 49152)
    layouts = [conv_sgmat.Layout("conv2d", vec, "f16", bias) for vec in (1, 8) for bias in (False, True)]
    layouts += [conv_sgmat.Layout("transpose", 1, "f16", bias) for bias in (False, True)]
    layouts += [conv_sgmat.Layout("grad_weight", vec, out, False) for vec in (1, 8) for out in ("f16", "f32")]
    compiled, failed = [], {}
    for config in members:
        # wide members: B's tile packed too (the default) and only A's wide (ANYGPU_CONV_SGMAT_PACK_B=0)
        for lay in layouts + ([lay._replace(pack_b=False) for lay in layouts] if config.wide else []):
            label = (f"{config.name}/{lay.kind}/a{lay.vec_a}/{lay.out}" + ("/bias" if lay.bias else "")
                     + ("/pb" if config.wide and lay.pack_b else ""))
            _, err = runner.compile(conv_sgmat.generate(config, lay))
            if err:
                failed[label] = err[:1500]
                print(f"{label}: {err[:1500]}", flush=True)
            else:
                compiled.append(label)
    from anygpu.ops.sgmat import split_sum_source
    _, err = runner.compile(split_sum_source("f16", False))
    if err:
        failed["sgmat_split_sum_f16"] = err[:1500]
    print(json.dumps({"members": [c.name for c in members], "compiled": compiled, "failed": failed}))
    return 1 if failed else 0


# ----------------------------------------------------------------------------- timing

def _per_call(run, sync, reps: int) -> float:
    """Seconds per call of run(): n and 2n calls, each followed by one sync, the
    difference (a read-back costs about 1.5 ms on Dawn: never one per call)."""
    def wall(n):
        best = 1e9
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                run()
            sync()
            best = min(best, time.perf_counter() - t0)
        return best
    wall(2)
    return max(wall(2 * reps) - wall(reps), 1e-9) / reps


def _anygpu_variant(dev, dtype: str, layer, rng):
    """(forward, forward+backward) closures of anygpu's Device ops on `dtype` Buffers."""
    _, _, _, batch, in_c, size, out_c, k, stride, pad = layer
    out_size = (size + 2 * pad - k) // stride + 1
    np_type = np.float32 if dtype == "f32" else np.float16
    x = dev.upload(rng.standard_normal(batch * in_c * size * size).astype(np_type))
    w = dev.upload((rng.standard_normal(out_c * in_c * k * k) * 0.1).astype(np_type))
    b = dev.upload(rng.standard_normal(out_c).astype(np_type))
    g = dev.upload(rng.standard_normal(batch * out_c * out_size * out_size).astype(np_type))
    geometry = (stride, pad, 1, 1)
    # The results stay referenced until the next call: an f32 convolution is deferred
    # (ops/fusion.py) and one whose result is gone before it is realized may never run.
    kept: list = []

    def forward():
        kept[:] = [dev.conv2d(x, w, b, batch, in_c, size, size, out_c, k, k, *geometry)]

    def both():
        kept[:] = [dev.conv2d(x, w, b, batch, in_c, size, size, out_c, k, k, *geometry),
                   dev.conv2d_grad_weight(x, g, batch, in_c, size, size, out_c, out_size, out_size, k, k, *geometry),
                   dev.conv2d_grad_bias(g, batch, out_c, out_size, out_size),
                   dev.conv2d_grad_input(g, w, batch, in_c, size, size, out_c, out_size, out_size, k, k, *geometry)]
    return forward, both


def _sync(dev):
    def sync():
        dev.realize_lazy()
        dev.synchronize()
    return sync


def _check_f16(dev, layer, rng) -> float:
    """Largest error of the f16 forward against float64, relative to the largest output."""
    _, _, _, batch, in_c, size, out_c, k, stride, pad = layer
    out_size = (size + 2 * pad - k) // stride + 1
    x = rng.standard_normal((batch, in_c, size, size)).astype(np.float16)
    w = (rng.standard_normal((out_c, in_c, k, k)) * 0.1).astype(np.float16)
    got = dev.read(dev.conv2d(dev.upload(x.ravel()), dev.upload(w.ravel()), None, batch, in_c, size, size, out_c,
                              k, k, stride, pad)).astype(np.float64).reshape(batch, out_c, out_size, out_size)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    want = np.zeros_like(got)
    for r in range(k):
        for s in range(k):
            patch = xp[:, :, r:r + stride * (out_size - 1) + 1:stride, s:s + stride * (out_size - 1) + 1:stride]
            want += np.einsum("oc,nchw->nohw", w[:, :, r, s].astype(np.float64), patch)
    return float(np.abs(got - want).max() / np.abs(want).max())


def _torch_variant(layer):
    import torch
    _, _, _, batch, in_c, size, out_c, k, stride, pad = layer
    x = torch.randn(batch, in_c, size, size, device="cuda", dtype=torch.float16, requires_grad=True)
    conv = torch.nn.Conv2d(in_c, out_c, k, stride, pad).cuda().half()
    grad = None

    def forward():
        with torch.no_grad():
            return conv(x)

    def both():
        nonlocal grad
        out = conv(x)
        if grad is None:
            grad = torch.randn_like(out)
        out.backward(grad)
    return forward, both, torch.cuda.synchronize


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--null", action="store_true")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--only", help="comma-separated layer names")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    if args.null:
        return null_compile()

    import anygpu as ag
    from anygpu.ops import conv_sgmat
    dev = ag.gpu()
    layers = [lay for lay in LAYERS if not args.only or lay[1] in args.only.split(",")]
    result: dict = {"adapter": dev.adapter_name, "runtime": os.environ.get("ANYGPU_RUNTIME", "auto"),
                    "matrix_units": conv_sgmat.available(dev), "layers": {}}
    rng = np.random.default_rng(0)
    torch_ok = True
    try:
        import torch
        torch_ok = torch.cuda.is_available()
    except Exception:
        torch_ok = False
    for layer in layers:
        row: dict = {}
        result["layers"][layer[1]] = row
        variants = [("f32", "f32"), ("f16", "f16")]
        for label, dtype in variants:
            try:
                forward, both = _anygpu_variant(dev, dtype, layer, rng)
                row[f"{label}_fwd_ms"] = round(_per_call(forward, _sync(dev), args.reps) * 1e3, 4)
                row[f"{label}_fwdbwd_ms"] = round(_per_call(both, _sync(dev), args.reps) * 1e3, 4)
            except Exception as exc:
                row[f"{label}_error"] = f"{type(exc).__name__}: {exc}"[:400]
                traceback.print_exc()
        if result["matrix_units"]:
            try:
                row["f16_rel_err"] = _check_f16(dev, layer, rng)
                _, _, _, batch, in_c, size, out_c, k, stride, pad = layer
                out_size = (size + 2 * pad - k) // stride + 1
                row["config"] = conv_sgmat.choose(dev, out_c, batch * out_size * out_size, 1, in_c * k * k).name
            except Exception as exc:
                row["f16_check_error"] = f"{type(exc).__name__}: {exc}"[:400]
        if args.sweep and result["matrix_units"]:
            sweep = row["sweep_fwdbwd_ms"] = {}
            for config in conv_sgmat._members(dev):
                os.environ["ANYGPU_CONV_SGMAT_CONFIG"] = config.name
                try:
                    _, both = _anygpu_variant(dev, "f16", layer, rng)
                    sweep[config.name] = round(_per_call(both, _sync(dev), args.reps) * 1e3, 4)
                except Exception as exc:
                    sweep[config.name] = f"{type(exc).__name__}: {exc}"[:200]
            os.environ.pop("ANYGPU_CONV_SGMAT_CONFIG", None)
        if torch_ok:
            try:
                forward, both, sync = _torch_variant(layer)
                row["torch_f16_fwd_ms"] = round(_per_call(forward, sync, args.reps) * 1e3, 4)
                row["torch_f16_fwdbwd_ms"] = round(_per_call(both, sync, args.reps) * 1e3, 4)
            except Exception as exc:
                row["torch_error"] = f"{type(exc).__name__}: {exc}"[:400]
        print(layer[1], {k: v for k, v in row.items() if k != "sweep_fwdbwd_ms"}, flush=True)
    totals: dict = {}
    for model, name, count, *_ in layers:
        for key, value in result["layers"][name].items():
            if key.endswith("_ms") and isinstance(value, float):
                totals.setdefault(model, {}).setdefault(key, 0.0)
                totals[model][key] = round(totals[model][key] + count * value, 4)
    result["model"] = totals
    line = json.dumps(result)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
