"""``anygpu convert IN.pth OUT.safetensors``: a PyTorch checkpoint as a signed safetensors file.

The checkpoint is read by `anygpu.io.pth` (restricted unpickler: nothing in the file is
imported or called; no PyTorch and no GPU needed) and written by `anygpu.save`: a state
dict as a flat safetensors file, anything nested with anygpu's structure entry, signed with
NanoSign and written atomically. Every dtype NumPy has keeps its type in the file (int64
beyond 32 bits included); bfloat16 becomes float32, exactly.
"""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register"]


def _count_tensors(obj, seen: set[int]) -> int:
    from anygpu.io.pth import HostTensor
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, HostTensor):
        return 1
    if isinstance(obj, dict):
        return sum(_count_tensors(value, seen) for value in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_count_tensors(value, seen) for value in obj)
    return 0


def _cmd_convert(args: argparse.Namespace) -> int:
    from anygpu.io import pth, serialization
    checkpoint = pth.read(args.input)
    digest = serialization.save(checkpoint, args.output)
    print(f"wrote {args.output}: {_count_tensors(checkpoint, set())} tensors from {args.input}, "
          f"NanoSign BLAKE3 {digest}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``convert`` subcommand (sets ``func``)."""
    text = ("convert a PyTorch checkpoint (.pt/.pth, read without running its code) to a signed "
            "safetensors file")
    parser = subparsers.add_parser("convert", help=text, description=text)
    parser.add_argument("input", type=Path, metavar="IN.pth", help="the PyTorch checkpoint")
    parser.add_argument("output", type=Path, metavar="OUT.safetensors", help="the file to write")
    parser.set_defaults(func=_cmd_convert)
