"""Whole PyTorch-style programs run twice from the same file: with real torch, then with
`torch` resolved to anygpu (torch_shim.py), from the same initial weights (shared_init.py).
Their printed output must agree line by line: words exactly, numbers (losses, learning
rates, accuracies) to 1e-4 relative."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
PROGRAMS = sorted(p.name for p in (HERE / "programs").glob("*.py") if p.name != "shared_init.py")
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)")


def run(backend: str, program: str, init: Path, mode: str) -> str:
    env = dict(os.environ, COMPAT_INIT=str(init), COMPAT_INIT_MODE=mode, PYTHONHASHSEED="0")
    if backend == "torch":  # the oracle is torch on the CPU: on a CUDA machine the programs would take
        env["CUDA_VISIBLE_DEVICES"] = ""  # their autocast-fp16 path there and print other losses
    done = subprocess.run([sys.executable, str(HERE / "torch_shim.py"), backend, str(HERE / "programs" / program)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, f"{program} under {backend} failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return done.stdout


def compare(ours: str, theirs: str, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    ours_lines, theirs_lines = ours.splitlines(), theirs.splitlines()
    assert len(ours_lines) == len(theirs_lines), f"{len(ours_lines)} lines vs torch's {len(theirs_lines)}:\n{ours}"
    for n, (a, b) in enumerate(zip(ours_lines, theirs_lines), 1):
        assert _NUMBER.sub("#", a) == _NUMBER.sub("#", b), f"line {n} differs:\n  anygpu: {a}\n  torch:  {b}"
        for x, y in zip(_NUMBER.findall(a), _NUMBER.findall(b)):
            fx, fy = float(x), float(y)
            # printed numbers are rounded: one unit of the last printed decimal may differ too
            unit = 10.0 ** -len(y.split(".")[1]) if "." in y and "e" not in y.lower() else 0.0
            assert abs(fx - fy) <= atol + rtol * abs(fy) + unit, f"line {n}: {x} vs torch {y}\n  anygpu: {a}\n  torch:  {b}"


@pytest.mark.parametrize("program", PROGRAMS)
def test_program_matches_torch(program, tmp_path):
    init = tmp_path / "init.npz"
    theirs = run("torch", program, init, "save")
    ours = run("anygpu", program, init, "load")
    compare(ours, theirs)


def test_compare_catches_a_different_loss():
    compare("loss 1.00000", "loss 1.00001")
    with pytest.raises(AssertionError):
        compare("loss 1.10000", "loss 1.00000")
    with pytest.raises(AssertionError):
        compare("Accuracy: 3/4", "Accuracy: 2/4")
    with pytest.raises(AssertionError):
        compare("tensor(3.)", "3")
