"""anygpu train --precision: 16-mixed runs the forward under float16 autocast with a
GradScaler (float32 master weights), trains to the same accuracy class as float32, and
records the precision in the run's settings."""

from __future__ import annotations

import json

import numpy as np

import anygpu as ag
from anygpu import amp
from anygpu.cli import main


def test_sixteen_mixed_trains_digits_under_autocast(capsys, tmp_path, monkeypatch):
    regions, scales = [], []
    real_enter = amp.autocast.__enter__
    real_scale = amp.GradScaler.scale

    def enter(self):
        regions.append((self._enabled, self.fast_dtype))
        return real_enter(self)

    def scale(self, outputs):
        scales.append(self.is_enabled())
        return real_scale(self, outputs)

    monkeypatch.setattr(amp.autocast, "__enter__", enter)
    monkeypatch.setattr(amp.GradScaler, "scale", scale)
    out = tmp_path / "mixed"
    code = main(["train", "digits", "--precision", "16-mixed", "--epochs", "2", "--limit", "400",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    assert regions and all(r == (True, ag.float16) for r in regions)
    assert scales and all(scales)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["precision"] == "16-mixed"
    accuracy = metrics["history"][-1]["test_accuracy"]
    assert accuracy > 0.6, accuracy           # two short epochs on 400 digits: far above chance (0.1)
    weights = ag.load(str(out / "model.safetensors"))
    assert all(v.dtype == ag.float32 for v in weights.values())   # master weights stay float32
    assert "test accuracy" in capsys.readouterr().out


def test_thirty_two_is_the_default_and_bad_values_are_refused(capsys, tmp_path):
    out = tmp_path / "plain"
    assert main(["train", "digits", "--epochs", "1", "--limit", "100", "--out", str(out), "--no-progress"]) == 0
    assert json.loads((out / "metrics.json").read_text())["settings"]["precision"] == "32"
    assert main(["train", "digits", "--precision", "8-mixed", "--out", str(tmp_path / "bad")]) == 2
    assert "argument --precision: invalid choice: '8-mixed'" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    assert np.isfinite(json.loads((out / "metrics.json").read_text())["history"][-1]["train_loss"])
