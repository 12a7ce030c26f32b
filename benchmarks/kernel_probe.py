"""Issue-11 kernel probe: every softmax / layer-norm / conv2d candidate beside torch, in one run.

    python3 benchmarks/kernel_probe.py [--quick] [--json probe.json] [--only softmax,layer_norm,conv,trusted]
                                       [--match REGEX] [--no-affine] [--configs LABELS]

Times (GPU timestamps, median) each candidate the tuners offer for softmax 4096x4096
(f32 and f16), layer norm 4096x4096 (f32 and f16; each register kernel also in its
two-reduction form, "two-pass"; the lean forms of ops/row_gen.py, suffix d / h, among them) and conv2d 3x3 64->64 56x56 batch 32,
checks each against the fallback's output, and compares trusted shader modules
(runtime/shaders.py) with checked ones for the register kernels and the direct conv.
torch CUDA eager (TF32 off) runs in the same process. Prints a table per group. --match
times only the row candidates whose label matches REGEX (re.search); --no-affine runs layer
norm without gamma and beta (what the affine terms cost); --configs adds register configs
(comma-separated labels of shapes the tuner does not offer, e.g. r512x1vgw8) to the
layer-norm candidates.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

import numpy as np

from anygpu.bench.suite import Peers
from anygpu.bench.timing import time_anygpu
from anygpu.ops import conv_tune, norm_tune, softmax_tune
from anygpu.ops import Device
from anygpu.ops.row_gen import F16_FORMS, RowConfig
from anygpu.runtime import shaders


def _err(got, want) -> float:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    return float(np.abs(got - want).max() / (np.abs(want).max() + 1e-30))


def _table(title: str, rows: list[tuple]) -> None:
    print(f"\n## {title}")
    print(f"{'candidate':<28} {'us':>9} {'GB/s|TFLOP/s':>13} {'vs torch':>9} {'err':>9}")
    for name, seconds, rate, ratio, err in rows:
        us = f"{seconds * 1e6:9.1f}" if seconds else f"{'-':>9}"
        print(f"{name:<28} {us} {rate:13.1f} {ratio:9.2f} {err:9.1e}" if seconds else f"{name:<28} {us}  {err}")


def probe_rows(dev, peers, kind: str, dtype: str, rows: int, cols: int, budget: float, results: dict,
               match: str = "", affine: bool = True, extra: tuple = ()) -> None:
    rng = np.random.default_rng(0)
    host_t = np.float16 if dtype == "f16" else np.float32
    x = (rng.standard_normal((rows, cols)) * 3).astype(host_t)
    gamma = rng.standard_normal(cols).astype(host_t)
    beta = rng.standard_normal(cols).astype(host_t)
    xb, gb, bb = dev.upload(x, dtype), dev.upload(gamma, dtype), dev.upload(beta, dtype)
    if not affine:
        gb = bb = None
    if kind == "softmax":
        tunable = (softmax_tune.F16_TUNABLES if dtype == "f16" else softmax_tune.TUNABLES)["softmax"]

        def run(c):
            return dev.softmax(xb, rows, cols, size=c)
    else:
        tunable = norm_tune.TUNABLES[dtype]

        def run(c):
            if isinstance(c, tuple):  # (RowConfig, "two-pass"): the register kernel's older form
                return dev.layer_norm(xb, gb, bb, rows, cols, 1e-5, config=c[0], one_pass=False)[0]
            return dev.layer_norm(xb, gb, bb, rows, cols, 1e-5, config=c)[0]
    torch_s = None
    if peers.torch is not None:
        torch = peers.torch
        tx = peers.tensor(x)
        tg, tb = peers.tensor(gamma), peers.tensor(beta)
        if kind == "softmax":
            torch_s = peers.time(lambda: torch.softmax(tx, dim=1), budget)
        else:
            torch_s = peers.time(lambda: torch.nn.functional.layer_norm(tx, (cols,), tg if affine else None,
                                                                        tb if affine else None), budget)
    nbytes = 2.0 * rows * cols * x.itemsize
    out = []
    reference = None
    candidates = tunable.candidates(dev, (dtype, rows, cols))
    if kind == "layer_norm":
        candidates += [c for c in map(RowConfig.parse, extra) if c not in candidates and c.serves(cols)
                       and (dtype == "f16" or c.form not in F16_FORMS)]
        # beside each one-pass register kernel, its two-reduction form
        candidates += [(c, "two-pass") for c in candidates if isinstance(c, RowConfig)]
    for cand in candidates:
        name = f"{cand[0].name} two-pass" if isinstance(cand, tuple) else tunable.label(cand)
        if match and not re.search(match, name) and cand != candidates[0]:
            continue  # the fallback (first) stays: the others' error is measured against it
        try:
            seconds = time_anygpu(dev, lambda: run(cand), budget)
            got = dev.read(run(cand)).astype(np.float64)
        except Exception as exc:  # report and go on
            out.append((name, None, 0, 0, f"failed: {' '.join(str(exc).split())[:80]}"))
            continue
        reference = got if reference is None else reference
        out.append((name, seconds, nbytes / seconds / 1e9, (torch_s or 0) / seconds, _err(got, reference)))
    if torch_s:
        out.append((f"torch {dtype}", torch_s, nbytes / torch_s / 1e9, 1.0, 0.0))
    title = f"{kind} {rows}x{cols} {dtype}" + ("" if affine else " (no gamma/beta)")
    _table(title, out)
    results[title] = [dict(zip(("name", "seconds", "rate", "ratio", "err"), r)) for r in out]


def probe_conv(dev, peers, budget: float, results: dict, quick: bool) -> None:
    batch, in_c, out_c, size, k = (2, 16, 16, 16, 3) if quick else (32, 64, 64, 56, 3)
    rng = np.random.default_rng(0)
    x = rng.random((batch, in_c, size, size), dtype=np.float32) - 0.5
    w = (rng.random((out_c, in_c, k, k), dtype=np.float32) - 0.5) * 0.1
    bias = rng.random(out_c, dtype=np.float32)
    xb, wb, bb = dev.upload(x), dev.upload(w), dev.upload(bias)
    p = ("f32", batch, in_c, size, size, out_c, k, k, (1, 1), (1, 1), (1, 1), 1)
    tunable = conv_tune.TUNABLES["conv2d"]
    flops = 2.0 * batch * out_c * size * size * in_c * k * k
    torch_s = None
    want = None
    if peers.torch is not None:
        torch = peers.torch
        tx, tw, tb = peers.tensor(x), peers.tensor(w), peers.tensor(bias)
        torch_s = peers.time(lambda: torch.nn.functional.conv2d(tx, tw, tb, padding=1), budget)
        want = torch.nn.functional.conv2d(tx.double(), tw.double(), tb.double(), padding=1).cpu().numpy()
    out = []
    for cand in tunable.candidates(dev, p):
        name = tunable.label(cand)

        def run(c=cand):
            return dev.conv2d(xb, wb, bb, batch, in_c, size, size, out_c, k, k, 1, 1, 1, 1, tiles=c)
        try:
            seconds = time_anygpu(dev, run, budget)
            got = dev.read(run()).reshape(batch, out_c, size, size)
        except Exception as exc:
            out.append((name, None, 0, 0, f"failed: {' '.join(str(exc).split())[:80]}"))
            continue
        err = _err(got, want) if want is not None else 0.0
        out.append((name, seconds, flops / seconds / 1e12, (torch_s or 0) / seconds, err))
    if torch_s:
        out.append(("torch", torch_s, flops / torch_s / 1e12, 1.0, 0.0))
    title = f"conv2d 3x3 {in_c}->{out_c} {size}x{size} batch {batch} (TFLOP/s)"
    _table(title, out)
    results[title] = [dict(zip(("name", "seconds", "rate", "ratio", "err"), r)) for r in out]
    # Backward (unchanged kernels, tuned as before): for the record of "no regression".
    go = dev.upload(rng.random((batch, out_c, size, size), dtype=np.float32) - 0.5)
    back = []
    for name, fn in (("grad_input", lambda: dev.conv2d_grad_input(go, wb, batch, in_c, size, size, out_c, size, size,
                                                                 k, k, 1, 1, 1, 1)),
                     ("grad_weight", lambda: dev.conv2d_grad_weight(xb, go, batch, in_c, size, size, out_c, size,
                                                                   size, k, k, 1, 1, 1, 1))):
        seconds = time_anygpu(dev, fn, budget)
        back.append((name, seconds, flops / seconds / 1e12, 0.0, 0.0))
    _table("conv2d backward (tuned GEMM kernels)", back)
    results["conv2d backward"] = [dict(zip(("name", "seconds", "rate"), r[:3])) for r in back]


def probe_trusted(dev, budget: float, results: dict, quick: bool) -> None:
    """The same kernels as trusted and as checked modules (ANYGPU_TRUSTED_SHADERS switch)."""
    from anygpu.ops.conv_gen import DirectTiles
    rows, cols = (256, 1024) if quick else (4096, 4096)
    rng = np.random.default_rng(1)
    xb = dev.upload(rng.standard_normal((rows, cols)).astype(np.float32))
    hb = dev.upload(rng.standard_normal((rows, cols)).astype(np.float16), "f16")
    batch, ch, size = (2, 16, 16) if quick else (32, 64, 56)
    cx = dev.upload(rng.random((batch, ch, size, size), dtype=np.float32) - 0.5)
    cw = dev.upload((rng.random((ch, ch, 3, 3), dtype=np.float32) - 0.5) * 0.1)
    cb = dev.upload(rng.random(ch, dtype=np.float32))
    width = max(16, min(1024, cols // 16))
    config = RowConfig(width, -(-cols // (4 * width)), True, "subgroup" in dev.features)
    tiles = DirectTiles(64, 8, 8, -(-size // 8), 2, 8)
    cases = {
        f"softmax f32 {config.name}": lambda: dev.softmax(xb, rows, cols, size=config),
        f"softmax f16 {config.name}": lambda: dev.softmax(hb, rows, cols, size=config),
        f"layer_norm f32 {config.name}": lambda: dev.layer_norm(xb, None, None, rows, cols, config=config)[0],
        f"conv2d direct {tiles.name}": lambda: dev.conv2d(cx, cw, cb, batch, ch, size, size, ch, 3, 3, 1, 1, 1, 1,
                                                          tiles=tiles),
    }
    original = shaders.trusted
    rows_out = []
    for name, fn in cases.items():
        timings = {}
        outputs = {}
        for mode in ("checked", "trusted", "checked again"):
            shaders.trusted = original if mode == "trusted" else (lambda code: False)
            dev._kernels.clear()
            try:
                timings[mode] = time_anygpu(dev, fn, budget)
                outputs[mode] = dev.read(fn()).astype(np.float64)
            finally:
                shaders.trusted = original
        same = float(np.abs(outputs["trusted"] - outputs["checked"]).max())
        rows_out.append((name, timings["checked"], timings["trusted"], timings["checked again"], same))
    dev._kernels.clear()
    print("\n## trusted vs checked shader modules (us)")
    print(f"{'kernel':<36} {'checked':>9} {'trusted':>9} {'checked2':>9} {'max diff':>9}")
    for name, a, b, c, same in rows_out:
        print(f"{name:<36} {a * 1e6:9.1f} {b * 1e6:9.1f} {c * 1e6:9.1f} {same:9.1e}")
    results["trusted"] = [dict(zip(("name", "checked", "trusted", "checked_again", "max_diff"), r)) for r in rows_out]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (software drivers)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--only", default="softmax,layer_norm,conv,trusted")
    parser.add_argument("--budget", type=float, default=0.1, help="seconds per measurement")
    parser.add_argument("--match", default="", help="only the row candidates whose label matches this regex")
    parser.add_argument("--no-affine", action="store_true", help="layer norm without gamma and beta")
    parser.add_argument("--configs", default="", help="more layer-norm register configs to time (labels)")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    dev = Device()
    peers = Peers()
    print(f"device: {dev.adapter_name} ({dev.backend}), driver {dev.driver}; features {sorted(dev.features)}")
    print("peers:", peers.describe())
    rows, cols = (256, 1024) if args.quick else (4096, 4096)
    results: dict = {"device": dev.adapter_name, "driver": dev.driver}
    dtypes = ["f32"] + (["f16"] if dev.supports("f16") else [])
    for kind in ("softmax", "layer_norm"):
        if kind in only:
            for dtype in dtypes:
                probe_rows(dev, peers, kind, dtype, rows, cols, args.budget, results, args.match,
                           not args.no_affine, tuple(filter(None, args.configs.split(","))))
    if "conv" in only:
        probe_conv(dev, peers, args.budget, results, args.quick)
    if "trusted" in only:
        probe_trusted(dev, args.budget, results, args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
