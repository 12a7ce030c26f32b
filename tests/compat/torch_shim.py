"""Run a Python file with `torch` resolved to anygpu (or to real torch), for the compat tests.

    python tests/compat/torch_shim.py anygpu programs/cnn_dataloader.py
    python tests/compat/torch_shim.py torch programs/cnn_dataloader.py

With `anygpu`, an import hook maps `torch` and every `torch.<sub>` to the same module
objects as `anygpu` / `anygpu.<sub>` (one Tensor class, not a second copy), so the file
runs unchanged. The program directory goes first on sys.path (for shared_init.py).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import runpy
import sys
from pathlib import Path


class AnygpuAsTorch(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`import torch.X` gives the module `anygpu.X` itself."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torch" or fullname.startswith("torch."):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("anygpu" + spec.name[len("torch"):])

    def exec_module(self, module):
        pass


def main(argv: list[str]) -> None:
    backend, program = argv[1], Path(argv[2]).resolve()
    if backend == "anygpu":
        sys.meta_path.insert(0, AnygpuAsTorch())
    elif backend != "torch":
        raise SystemExit(f"torch_shim: backend must be 'torch' or 'anygpu', got {backend!r}")
    else:
        import torch
        torch.set_num_threads(1)
    sys.path.insert(0, str(program.parent))
    sys.argv = [str(program)] + argv[3:]
    runpy.run_path(str(program), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv)
