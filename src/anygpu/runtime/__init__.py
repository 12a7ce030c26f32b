"""Layer 0's engine room: the only package that imports wgpu (or Dawn's wgpudawn: webgpu.py
chooses, by ANYGPU_RUNTIME)."""

import os as _os
import tempfile as _tempfile


def _private_runtime_dir() -> str:
    """One 0700 folder per user, reused across runs (not a new temp folder each import)."""
    path = _os.path.join(_tempfile.gettempdir(), f"anygpu-xdg-{_os.getuid()}")
    try:
        _os.makedirs(path, mode=0o700, exist_ok=True)
        if _os.stat(path).st_uid == _os.getuid():
            return path
    except OSError:
        pass
    return _tempfile.mkdtemp(prefix="anygpu-xdg-")


# Mesa's EGL/GL drivers print "XDG_RUNTIME_DIR is invalid" for every adapter probe
# when it is unset (CI, containers); a private directory keeps the output clean.
if not _os.environ.get("XDG_RUNTIME_DIR"):
    _os.environ["XDG_RUNTIME_DIR"] = _private_runtime_dir()

from .device import NO_ADAPTER_HELP, AdapterInfo, Buffer, Device, Kernel, adapter_infos, list_adapters
from .errors import GpuError, LimitError
from .params import Params
from .shaders import load_shader
from .webgpu import matrix_configs

__all__ = ["Buffer", "Device", "Kernel", "GpuError", "LimitError", "list_adapters",
           "load_shader", "Params", "NO_ADAPTER_HELP", "AdapterInfo", "adapter_infos", "matrix_configs"]
