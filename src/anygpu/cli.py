"""The ``anygpu`` command: ``info``, ``bench``, ``train``, ``tune``, and NanoSign's ``sign|verify|strip|hash``.

Exit codes: 0 success; 2 bad arguments or bad data, reported as ONE line on stderr
(``anygpu: error: ...``) and never a traceback. ``verify`` and ``strip`` also use 1 for a
failed signature (see ``anygpu.nanosign_cli``). Mesa's "XDG_RUNTIME_DIR is invalid" noise
is handled where wgpu is loaded, in ``anygpu.runtime``.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata
from typing import Sequence

import anygpu as ag
from anygpu import convert_cli, infer, nanosign_cli, train
from anygpu.distributed import DistributedError
from anygpu.io.datasets import DataError
from anygpu.io.nanosign import TamperedError
from anygpu.runtime import list_adapters

EXIT_OK = 0
EXIT_ERROR = 2

# Limits `anygpu info` prints, in this order, with how to show them.
_KEY_LIMITS = (
    ("max-buffer-size", "bytes"),
    ("max-storage-buffer-binding-size", "bytes"),
    ("max-compute-workgroup-storage-size", "bytes"),
    ("max-compute-invocations-per-workgroup", "count"),
    ("max-compute-workgroup-size-x", "count"),
    ("max-compute-workgroups-per-dimension", "count"),
    ("max-storage-buffers-per-shader-stage", "count"),
    ("max-uniform-buffer-binding-size", "bytes"),
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one stderr line (the SPEC's promise), not usage + error."""

    def error(self, message: str):  # noqa: D102 — argparse's hook
        hint = f" (see '{self.prog} --help')"
        self.exit(EXIT_ERROR, f"anygpu: error: {message}{hint}\n")


# --------------------------------------------------------------------------- info


def _format_bytes(value: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value} bytes ({value / size:.3g} {unit})"
    return f"{value} bytes"


def _cmd_info(args: argparse.Namespace) -> int:
    try:
        wgpu_version = metadata.version("wgpu")
    except metadata.PackageNotFoundError:
        wgpu_version = "unknown"
    print(f"anygpu {ag.__version__} (wgpu {wgpu_version}, Python {sys.version.split()[0]})")

    adapters = list_adapters()
    dev = ag.gpu()  # raises GpuError, naming the driver to install, when there is none
    chosen_info = None
    print(f"adapters wgpu sees ({len(adapters)}):")
    wanted = os.environ.get("ANYGPU_ADAPTER", "").strip()
    for index, adapter in enumerate(adapters):
        info = adapter.info
        chosen = index == int(wanted) if wanted.isdigit() else (
            chosen_info is None
            and info.get("device") == dev.adapter_name
            and info.get("backend_type") == dev.backend
            and info.get("description", "") == dev.driver
        )
        if chosen:
            chosen_info = adapter
        mark = "*" if chosen else " "
        print(
            f"  {mark} [{index}] {info.get('device') or info.get('description') or 'unknown'}"
            f"  backend {info.get('backend_type', '?')}, type {info.get('adapter_type', '?')},"
            f" driver {info.get('description') or '?'}"
        )
    selection = [
        f"{name}={os.environ[name]}" for name in ("ANYGPU_ADAPTER", "ANYGPU_BACKEND") if os.environ.get(name)
    ]
    how = ", ".join(selection) if selection else "wgpu's high-performance choice; set ANYGPU_ADAPTER=<index or name> / ANYGPU_BACKEND to pick"
    if wanted.lower() == "fastest":
        from anygpu.runtime import measure

        how += "; " + measure.fastest(os.environ.get("ANYGPU_BACKEND") or None)[1]
    print(f"chosen (*): {dev.adapter_name} ({dev.backend}, {dev.adapter_type}) — {how}")
    from anygpu.runtime import webgpu

    print(f"runtime: {dev.runtime} ({webgpu.current().module.__name__} {webgpu.current().version}) — "
          f"{dev.runtime_reason}; set {webgpu.ENV}=auto|wgpu|dawn to pick")
    print(f"subgroup matrices: {webgpu.describe_matrices(dev)}")

    print("key limits:")
    for name, kind in _KEY_LIMITS:
        if name in dev.limits:
            value = int(dev.limits[name])
            shown = _format_bytes(value) if kind == "bytes" else str(value)
            print(f"  {name:<40} {shown}")
    print(f"features anygpu uses: {', '.join(sorted(dev.features)) or 'none'}")
    if chosen_info is not None:
        others = sorted(set(chosen_info.features) - set(dev.features))
        print(f"other adapter features ({len(others)}): {', '.join(others) or 'none'}")
        from anygpu.runtime import probe

        index = next(i for i, a in enumerate(adapters) if a is chosen_info)
        if dev.runtime == "wgpu":  # wgpu-native's own feature (Dawn's is subgroup matrices, above)
            print(f"cooperative-matrix device (tensor cores from WGSL): "
                  f"{probe.cooperative_matrix(index, chosen_info.features)}")
    if args.measure:
        from anygpu.runtime import measure

        for line in measure.table(measure.measure_all()):
            print(line)
    return EXIT_OK


# --------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The full ``anygpu`` argument parser (each subcommand sets ``func``)."""
    parser = _Parser(
        prog="anygpu",
        description="Train and run neural networks on any GPU through WebGPU and WGSL.",
    )
    parser.add_argument("--version", action="version", version=f"anygpu {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True

    info = subparsers.add_parser(
        "info", help="list the adapters wgpu sees, the one chosen, its limits and features",
        description="List every adapter wgpu sees, the one anygpu chooses, its key limits and features.",
    )
    info.add_argument("--measure", action="store_true",
                      help="time every adapter on a small fixed suite (matmul, bandwidth, dispatch overhead), "
                           "print a table and cache it for ANYGPU_ADAPTER=fastest")
    info.set_defaults(func=_cmd_info)

    try:
        from anygpu import bench
    except ImportError:  # the benchmark suite is optional in a trimmed install
        bench = None
    register_bench = getattr(bench, "register", None)
    if register_bench is not None:
        register_bench(subparsers)

    train.register(subparsers)
    infer.register(subparsers)  # predict, eval, sample
    from anygpu.onnx import command as onnx_command
    onnx_command.register(subparsers)  # export
    nanosign_cli.register(subparsers)
    convert_cli.register(subparsers)  # convert a PyTorch checkpoint to safetensors
    from anygpu import tune_cli

    tune_cli.register(subparsers)  # anygpu tune -- CMD
    return parser


def _version() -> str:
    try:
        return metadata.version("anygpu")
    except metadata.PackageNotFoundError:
        return "unknown"


def _one_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    if isinstance(error, OSError) and error.filename and error.strerror:
        text = f"{error.filename}: {error.strerror}"
    return " ".join(text.split())


def _stop_other_ranks(message: str, code: int) -> None:
    """Under mpiexec, one rank's error ends the whole job (MPI_Abort) instead of leaving the others waiting."""
    distributed = sys.modules.get("anygpu.distributed")
    if distributed is not None and distributed.is_initialized() and distributed.get_world_size() > 1:
        distributed.abort(f"{message} (rank {distributed.get_rank()} of {distributed.get_world_size()}; "
                          f"stopping every rank)", code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``anygpu`` command with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as stop:  # --help, --version, usage errors: argparse already printed
        return stop.code if isinstance(stop.code, int) else EXIT_ERROR
    try:
        return int(args.func(args))
    except (DataError, TamperedError, ValueError, OSError, ag.GpuError, DistributedError) as error:
        # bad data or arguments, a tampered file, an unwritable --out, no usable adapter
        _stop_other_ranks(f"anygpu: error: {_one_line(error)}", EXIT_ERROR)
        print(f"anygpu: error: {_one_line(error)}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        where = " (continue with --resume: the last finished epoch is checkpointed)" if args.command == "train" else ""
        print(f"anygpu: interrupted{where}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
