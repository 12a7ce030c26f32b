"""`anygpu bench`: matmul, conv2d, elementwise add, softmax, small-op overhead and a
training step, each beside NumPy and PyTorch measured in the same run.

    anygpu bench [--json FILE] [--plot FILE] [--tune] [--quick] [--sizes 256,1024,512x256x128]

`register(subparsers)` adds the subcommand to the `anygpu` parser (cli.py);
`python -m anygpu.bench` runs it alone. See benchmarks/README.md."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

from .suite import Peers, Row, run_suite, sizes_for

__all__ = ["register", "main", "run", "parse_sizes", "Row"]

BENCHMARKS = ("matmul", "conv2d", "add", "softmax", "norm", "overhead", "train", "gpt")


def parse_sizes(text: str) -> list[tuple[int, int, int]]:
    """'256,1024,512x256x128' -> [(256, 256, 256), (1024, 1024, 1024), (512, 256, 128)] (m, n, k)."""
    sizes = []
    for part in text.split(","):
        part = part.strip().lower()
        if not part:
            continue
        try:
            dims = [int(d) for d in part.split("x")]
        except ValueError:
            raise ValueError(f"bench: --sizes entry {part!r} is not N or MxNxK") from None
        if len(dims) == 1:
            dims *= 3
        if len(dims) != 3 or min(dims) < 1:
            raise ValueError(f"bench: --sizes entry {part!r} is not N or MxNxK with positive sizes")
        sizes.append(tuple(dims))
    if not sizes:
        raise ValueError("bench: --sizes is empty")
    return sizes


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="FILE", help="also write every figure to FILE as JSON")
    parser.add_argument("--plot", metavar="FILE", help="also draw the figures into FILE (PNG)")
    parser.add_argument("--tune", action="store_true",
                        help="re-tune matmul for each size (timing every candidate kernel) before measuring")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes and short measurements (for software drivers and CI)")
    parser.add_argument("--sizes", metavar="LIST",
                        help="matmul sizes, comma-separated N or MxNxK (default: suited to the adapter); "
                             "the f16 matmul row keeps its own size (4096^3 on GPUs)")
    parser.add_argument("--only", metavar="LIST",
                        help=f"comma-separated subset of: {', '.join(BENCHMARKS)}")
    parser.add_argument("--no-torch", action="store_true", help="leave PyTorch out even when importable")


def register(subparsers) -> argparse.ArgumentParser:
    """Add `bench` to the `anygpu` command's subparsers."""
    parser = subparsers.add_parser(
        "bench", help="time anygpu's ops beside NumPy and PyTorch on this machine",
        description="Time matmul, conv2d, elementwise add, softmax, small-op overhead and a training "
                    "step with anygpu, NumPy and PyTorch in one run; print anygpu/peer ratios.")
    _add_arguments(parser)
    parser.set_defaults(func=run)
    return parser


def _fmt_rate(row: Row, seconds) -> str:
    value = row.rate(seconds)
    if value is None:
        return "-"
    if row.unit == "GFLOP/s" and value >= 1000:
        return f"{value / 1000:.2f} TFLOP/s"
    if row.unit == "us/op":
        return f"{value:.1f} us/op"
    return f"{value:.1f} {row.unit}"


def _fmt_time(seconds) -> str:
    if seconds is None:
        return "-"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def _fmt_ratio(value) -> str:
    return "-" if value is None else f"x{value:.2f}"


def format_row(row: Row) -> str:
    if row.anygpu is None:
        return f"{row.name:<44} {row.note}"
    cells = [f"{row.name:<44}", f"{_fmt_time(row.anygpu):>10}", f"{_fmt_rate(row, row.anygpu):>15}",
             f"{_fmt_rate(row, row.peers.get('numpy')):>15}", f"{_fmt_rate(row, row.peers.get('torch')):>15}",
             f"{_fmt_ratio(row.ratio('numpy')):>9}", f"{_fmt_ratio(row.ratio('torch')):>9}"]
    extra = []
    if "config" in row.detail:
        extra.append(row.detail["config"])
    for peer, seconds in row.peers.items():   # peers beyond the table's columns (torch fp16)
        if peer not in ("numpy", "torch"):
            extra.append(f"{peer} {_fmt_rate(row, seconds)}, {_fmt_ratio(row.ratio(peer))}")
    if row.note:
        extra.append(row.note)
    return " ".join(cells) + ("  " + "; ".join(extra) if extra else "")


HEADER = (f"{'benchmark':<44} {'anygpu':>10} {'anygpu rate':>15} {'numpy rate':>15} {'torch rate':>15} "
          f"{'vs numpy':>9} {'vs torch':>9}")


def _plot(rows: list[Row], path: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [r for r in rows if r.anygpu is not None and r.unit != "us/op"]
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    names = [r.name.replace(" floats", "") for r in shown]
    width = 0.27
    for i, (label, get) in enumerate((("anygpu", lambda r: r.anygpu), ("numpy", lambda r: r.peers.get("numpy")),
                                      ("torch", lambda r: r.peers.get("torch")))):
        values = [r.rate(get(r)) or 0.0 for r in shown]
        axes[0].bar([x + (i - 1) * width for x in range(len(shown))], values, width, label=label)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("GFLOP/s or GB/s (higher is better)")
    axes[0].set_xticks(range(len(shown)), names, rotation=40, ha="right", fontsize=7)
    axes[0].legend()
    ratios = [r.ratio("torch") or 0.0 for r in shown]
    axes[1].bar(range(len(shown)), ratios, color="tab:green")
    axes[1].axhline(1.0, color="gray", lw=0.8)
    axes[1].set_ylabel("anygpu speed / torch speed")
    axes[1].set_xticks(range(len(shown)), names, rotation=40, ha="right", fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _finite(value):
    """JSON has no NaN or infinity: such figures become null."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run(args: argparse.Namespace) -> int:
    """Run the suite as the parsed `args` ask; print the table; write JSON / plot."""
    import anygpu as ag

    only = None
    if args.only:
        only = {name.strip() for name in args.only.split(",") if name.strip()}
        unknown = only - set(BENCHMARKS)
        if unknown:
            raise ValueError(f"bench: unknown --only entries {sorted(unknown)}; choose from {', '.join(BENCHMARKS)}")
    matmul_sizes = parse_sizes(args.sizes) if args.sizes else None
    if args.plot:  # before the suite runs, not after
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("bench --plot: needs matplotlib, the optional extra: pip install 'anygpu[plot]'") from None
    dev = ag.gpu()
    sizes = sizes_for(dev, quick=args.quick, matmul=matmul_sizes)
    peers = Peers(use_torch=not args.no_torch)
    timer = "GPU timestamps" if "timestamp-query" in dev.features else "wall clock"
    date = time.strftime("%Y-%m-%d")
    title = (f"anygpu {ag.__version__} bench on {dev.adapter_name} ({dev.backend}, {dev.adapter_type}; "
             f"driver {dev.driver or 'unknown'}), {date}")
    print(title)
    print("peers: " + "; ".join(peers.describe().values()) + f"; anygpu timed with {timer}")
    print("ratio = peer time / anygpu time (above 1: anygpu is faster)")
    print(HEADER)
    rows = run_suite(dev, sizes, peers, only=only, tune=args.tune,
                     progress=lambda row: print(format_row(row), flush=True))
    if args.json:
        report = {
            "anygpu": ag.__version__,
            "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "command": " ".join(sys.argv),
            "device": {"adapter": dev.adapter_name, "backend": dev.backend, "type": dev.adapter_type,
                       "driver": dev.driver, "timer": timer},
            "host": {"python": platform.python_version(), "machine": platform.machine(),
                     "cpus": os.cpu_count()},
            "peers": peers.describe(),
            "quick": bool(args.quick),
            "rows": [row.to_json() for row in rows],
        }
        with open(args.json, "w") as f:
            json.dump(_finite(report), f, indent=1, allow_nan=False, default=float)
        print(f"wrote {args.json}")
    if args.plot:
        _plot(rows, args.plot, title)
        print(f"wrote {args.plot}")
    return 0


def main(argv=None) -> int:
    """`python -m anygpu.bench [options]` (the same options as `anygpu bench`)."""
    parser = argparse.ArgumentParser(prog="anygpu bench", description=register.__doc__)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ValueError as exc:
        print(f"anygpu bench: error: {exc}", file=sys.stderr)
        return 2
