"""Running emulated matrix kernels on Dawn from a suite that runs on wgpu-native: why this
process cannot (`reason`), and the same test file again in a child under ANYGPU_RUNTIME=dawn
(`run_tests`), skipped where Dawn gets no adapter. Shared by the emulated-kernel tests
(test_sgmat_emulated.py, test_flash_sgmat_emulated.py)."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from anygpu.ops import gpu

ROOT = Path(__file__).resolve().parents[2]
HAS_DAWN = importlib.util.find_spec("wgpudawn") is not None
NO_ADAPTER = "Dawn's adapter is unavailable"


@functools.lru_cache(maxsize=None)
def reason() -> str | None:
    """Why this process does not run the emulated kernels (None: it does, on Dawn)."""
    if not HAS_DAWN:
        return "needs the extra anygpu[dawn]"
    from anygpu.runtime import GpuError, webgpu
    try:
        if webgpu.current().name != "dawn":
            return "emulated kernels run on Dawn (test_emulated_kernels_on_dawn runs them)"
        gpu()
    except (GpuError, RuntimeError) as exc:     # RuntimeError: Dawn found no adapter
        return f"{NO_ADAPTER}: {' '.join(str(exc).split())[:200]}"
    return None


def run_tests(path: str, select: str, **env: str) -> None:
    """The tests of `path` that `-k select` picks, in a child on Dawn (extra environment
    `env`): they must all pass, none skipped; skips this test where Dawn has no adapter."""
    if reason() is None:
        pytest.skip("this process runs on Dawn: the tests above ran here")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-rs", "-p", "no:cacheprovider", path,
                           "-k", select], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "ANYGPU_RUNTIME": "dawn", **env}, cwd=ROOT)
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    if done.returncode == 0 and " passed" not in last and NO_ADAPTER in done.stdout:
        pytest.skip(f"{NO_ADAPTER} (child: {last})")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in last and "skipped" not in last, done.stdout[-2000:]
