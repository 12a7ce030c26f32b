"""`anygpu train` runs its steps through anygpu.compile (issue 11): the replayed steps give
the very same weights as eager steps (ANYGPU_COMPILE=0), and steps really are replayed."""

import json

import pytest

import anygpu as ag
from anygpu.cli import main


@pytest.mark.parametrize("precision", ["32", "16-mixed"])
def test_compiled_training_equals_eager_training(capsys, tmp_path, monkeypatch, precision):
    """16-mixed too: autocast and the GradScaler (Adam takes its found_inf flag) are captured."""
    made = []
    real_compile = ag.compile

    def recording_compile(fn, **kwargs):
        step = real_compile(fn, **kwargs)
        made.append(step)
        return step
    monkeypatch.setattr(ag, "compile", recording_compile)
    argv = ["train", "digits", "--epochs", "2", "--limit", "96", "--batch-size", "32", "--no-progress",
            "--precision", precision]
    assert main([*argv, "--out", str(tmp_path / "compiled")]) == 0
    assert made and made[0].stats["replayed"] >= 3, made[0].stats
    assert made[0].reason() is None
    history = json.loads((tmp_path / "compiled" / "metrics.json").read_text())["history"]
    assert history[-1]["replayed_steps"] == made[0].stats["replayed"]
    monkeypatch.setenv("ANYGPU_COMPILE", "0")
    assert main([*argv, "--out", str(tmp_path / "eager")]) == 0
    capsys.readouterr()
    assert len(made) == 1  # the eager run compiled nothing
    compiled = (tmp_path / "compiled" / "model.safetensors").read_bytes()
    assert compiled == (tmp_path / "eager" / "model.safetensors").read_bytes()
