"""`import torch` resolved to anygpu inside DataLoader worker processes, when the main process
runs that way through an import hook (a PyTorch script left unchanged).

A worker imports the main script again before it loads anything (so that classes defined
there unpickle); without the same resolution its `import torch` would find the real torch,
or nothing. The worker processes fork from a server that imports this module first
(forkserver preload): with ANYGPU_WORKER_TORCH_ALIAS=1 in the environment, which the
DataLoader sets when `sys.modules["torch"] is anygpu`, it maps `torch` and every
`torch.<sub>` to the module objects `anygpu` / `anygpu.<sub>`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import os
import sys

ENV = "ANYGPU_WORKER_TORCH_ALIAS"


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


def torch_is_anygpu() -> bool:
    """Whether this process resolves `torch` to anygpu."""
    torch = sys.modules.get("torch")
    return torch is not None and torch is sys.modules.get("anygpu")


def install() -> None:
    if not any(isinstance(finder, AnygpuAsTorch) for finder in sys.meta_path):
        sys.meta_path.insert(0, AnygpuAsTorch())


if os.environ.get(ENV) == "1":
    install()
