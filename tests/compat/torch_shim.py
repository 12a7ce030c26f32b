"""Run a Python file with `torch` resolved to anygpu (or to real torch), for the compat tests.

    python tests/compat/torch_shim.py anygpu programs/cnn_dataloader.py
    python tests/compat/torch_shim.py torch programs/cnn_dataloader.py

With `anygpu`, an import hook maps `torch` and every `torch.<sub>` to the same module
objects as `anygpu` / `anygpu.<sub>` (one Tensor class, not a second copy), so the file
runs unchanged. The program directory goes first on sys.path (for shared_init.py).
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    backend, program = argv[1], Path(argv[2]).resolve()
    if backend == "anygpu":
        # the package's own hook (the one its DataLoader workers install too)
        from anygpu.utils.data import torch_alias
        torch_alias.install()
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
