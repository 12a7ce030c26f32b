"""Start `mpiexec -n N python ...` jobs from pytest, always bounded in time."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

WORKERS = Path(__file__).parent / "workers"
ROOT = Path(__file__).resolve().parents[2]


def mpiexec() -> str:
    """The mpiexec of this Python's environment (the mpich wheel puts it beside python)."""
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("no mpiexec: pip install 'anygpu[dist]'")
    pytest.importorskip("mpi4py", reason="pip install 'anygpu[dist]'")
    return found


def python_path() -> str:
    """This checkout's src first, then whatever PYTHONPATH already holds (a GPU kit's packages)."""
    return os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))


def run(argv: list[str], n: int = 2, timeout: float = 120.0, env: dict | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `mpiexec -n n <argv>`; kill the whole job (its own process group) on timeout."""
    full_env = {**os.environ, "PYTHONPATH": python_path(), "PYTHONUNBUFFERED": "1", **(env or {})}
    process = subprocess.Popen([mpiexec(), "-n", str(n), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=full_env, cwd=cwd, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the job we started, and only it
        out, err = process.communicate()
        pytest.fail(f"mpiexec job did not end within {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def run_worker(name: str, *args: str, n: int = 2, timeout: float = 120.0, env: dict | None = None):
    return run([sys.executable, str(WORKERS / name), *args], n=n, timeout=timeout, env=env)


def results(path: Path, n: int = 2) -> list[dict]:
    """Each rank's JSON result, written by the workers as <path>.<rank>.json."""
    return [json.loads(Path(f"{path}.{rank}.json").read_text()) for rank in range(n)]
