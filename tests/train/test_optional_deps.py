"""A small install (issue 28 part 3): the core dependencies are only what every use needs;
matplotlib (loss plots, the extra `plot`) and everything else are extras, and anygpu trains
the digits without any of them (the 1797 digits ship in the package)."""

from __future__ import annotations

import re
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
CORE = {"wgpu", "numpy", "blake3", "safetensors", "tqdm", "pillow", "threadpoolctl"}
# packages a plain `pip install anygpu` does not bring: none may be needed to import anygpu or train
OPTIONAL = ("matplotlib", "sklearn", "scipy", "torch", "onnx", "onnxruntime", "tensorboard", "mpi4py", "wgpudawn")


def name_of(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()


def test_core_dependencies_and_extras():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert {name_of(r) for r in project["dependencies"]} == CORE
    extras = project["optional-dependencies"]
    assert [name_of(r) for r in extras["plot"]] == ["matplotlib"]
    assert "scikit-learn" not in {name_of(r) for extra, reqs in extras.items() if extra != "test" for r in reqs}
    # `all` is every extra but the test tools, by reference, so it cannot fall behind
    (everything,) = extras["all"]
    named = re.fullmatch(r"anygpu\[([a-z,]+)\]", everything).group(1).split(",")
    assert sorted(named) == sorted(set(extras) - {"all", "test"})


def test_training_digits_needs_no_optional_package(tmp_path):
    """In a fresh interpreter where every optional package is unimportable: import anygpu,
    train the digits; the run says once that no loss plot was written and how to get one."""
    out = tmp_path / "run"
    code = (
        "import sys\n"
        f"for name in {OPTIONAL!r}: sys.modules[name] = None  # import of any of them raises ImportError\n"
        "from anygpu.cli import main\n"
        f"code = main(['train', 'digits', '--limit', '64', '--batch-size', '16', '--epochs', '2', '--seed', '1',"
        f" '--out', {str(out)!r}, '--no-progress'])\n"
        "print('exit', code)\n"
    )
    # wgpudawn is among the hidden packages: the child takes wgpu-native even where this run forces Dawn
    env = {k: v for k, v in os.environ.items() if k != "ANYGPU_RUNTIME"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and "exit 0" in done.stdout, done
    from anygpu.train.loop import CHECKPOINT, LOSS_PLOT, METRICS, MODEL, NO_PLOT

    assert done.stdout.count(NO_PLOT) == 1 and "pip install 'anygpu[plot]'" in NO_PLOT, done.stdout
    assert sorted(p.name for p in out.iterdir()) == sorted([CHECKPOINT, METRICS, MODEL])
    wrote = next(line for line in done.stdout.splitlines() if line.startswith("wrote "))
    assert LOSS_PLOT not in wrote


def test_bench_plot_without_matplotlib_names_the_extra(monkeypatch, capsys, tmp_path):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
    from anygpu.cli import main

    assert main(["bench", "--quick", "--plot", str(tmp_path / "bench.png")]) == 2
    err = capsys.readouterr().err
    assert "bench --plot: needs matplotlib" in err and "pip install 'anygpu[plot]'" in err
    assert not (tmp_path / "bench.png").exists()


def test_plot_loss_without_matplotlib_writes_nothing(monkeypatch, tmp_path):
    from anygpu.train import loop

    history = [{"epoch": 1, "train_loss": 0.5, "test_accuracy": 0.9}]
    assert loop._plot_loss(tmp_path / "with.png", [[0.5, 0.7]], history, "t")  # matplotlib is a test dependency
    assert (tmp_path / "with.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")] + ["matplotlib"]:
        monkeypatch.setitem(sys.modules, name, None)
    assert loop._plot_loss(tmp_path / "without.png", [[0.5, 0.7]], history, "t") is False
    assert not (tmp_path / "without.png").exists()


def test_shipped_digits_are_scikit_learns():
    """src/anygpu/io/digits.npz was made once from scikit-learn's bundled copy; this is the check
    (scikit-learn is a test dependency only). To make it again:
    python -c "import numpy as np; from sklearn.datasets import load_digits as d; b = d();
    np.savez_compressed('src/anygpu/io/digits.npz', images=b.images.astype(np.uint8), labels=b.target.astype(np.uint8))"
    """
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    from anygpu.io import datasets

    reference = sklearn_datasets.load_digits()
    with np.load(datasets.DIGITS_FILE, allow_pickle=False) as stored:
        assert sorted(stored.files) == ["images", "labels"]
        images, labels = stored["images"], stored["labels"]
    assert images.dtype == labels.dtype == np.uint8 and images.shape == (1797, 8, 8)
    np.testing.assert_array_equal(images, reference.images)
    np.testing.assert_array_equal(labels, reference.target)
    assert list(reference.target_names) == list(range(10))
    assert datasets.DIGITS_FILE.stat().st_size < 64_000
