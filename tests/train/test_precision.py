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


# --------------------------------------------------------------------------- the captured 16-mixed step

STEPS = 9
INF_STEP = 6          # a batch whose float16 cast overflows: its gradients are inf/NaN, the step is skipped
LR_CHANGE_STEP = 7    # the learning rate halves here, between replays (as StepLR does between epochs)


def _digits_steps(precision, batches, scaler_args):
    """The loop's step (train/loop.py _compiled_step) on the digits task over `batches`:
    (step, task, scaler, losses, dispatches of the last step, initial weights)."""
    from anygpu.train import loop
    from anygpu.train.stratagems import build_digits

    ag.manual_seed(3)
    settings = loop.Settings(stratagem="digits", epochs=1, batch_size=len(batches[0][0]), lr=4e-3, seed=3,
                             out=None, precision=precision)
    task = build_digits(settings)
    initial = {name: value.numpy().copy() for name, value in task.model.state_dict().items()}
    mixed = precision == "16-mixed"
    scaler = ag.amp.GradScaler("cuda", enabled=mixed, **scaler_args)
    step = loop._compiled_step(task, scaler, mixed)
    dev = ag.gpu()
    losses, dispatches = [], 0
    for i, (x, y) in enumerate(batches):
        if i == LR_CHANGE_STEP:
            task.optimizer.param_groups[0]["lr"] *= 0.5
        before = dev.stats["dispatches"]
        losses.append(float(step(*task.inputs(x, y, None)).item()))
        dispatches = dev.stats["dispatches"] - before
    return step, task, scaler, losses, dispatches, initial


def _torch_steps(initial, batches, scaler_args):
    """The same steps in torch on the CPU: float16 autocast, GradScaler, Adam (the reference)."""
    import torch

    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(32 * 4 * 4, 64),
        torch.nn.ReLU(), torch.nn.Linear(64, 10))
    model.load_state_dict({name: torch.tensor(value) for name, value in initial.items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=4e-3)
    scaler = torch.amp.GradScaler("cpu", **scaler_args)
    losses, scales = [], []
    for i, (x, y) in enumerate(batches):
        if i == LR_CHANGE_STEP:
            optimizer.param_groups[0]["lr"] *= 0.5
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(torch.tensor(x)), torch.tensor(y, dtype=torch.int64))
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        losses.append(float(loss.detach()))
        scales.append(scaler.get_scale())
    return model, scaler, losses


def test_sixteen_mixed_step_is_replayed_and_matches_torch_autocast(rng):
    """The 16-mixed digits step replays as the float32 one does (nothing read back: the
    scaler's inf check, skip and next scale stay on the GPU) with a bounded number of extra
    dispatches, and gives torch's CPU autocast + GradScaler + Adam results: the same scale
    after a skipped step (an input that overflows float16) and growth, losses and weights
    within float16 rounding."""
    from anygpu.io.datasets import load_digits

    train, _ = load_digits(seed=0)
    picks = [rng.choice(len(train), 27, replace=False) for _ in range(STEPS)]   # an odd batch size
    batches = [(train.x[p].copy(), train.y[p].copy()) for p in picks]
    batches[INF_STEP][0][0, 0, 3, 4] = 1e6    # float16 tops out at 65504: inf in the forward
    scaler_args = {"init_scale": 2.0 ** 10, "growth_interval": 2}

    plain = _digits_steps("32", batches, {})
    step, task, scaler, losses, dispatches, initial = _digits_steps("16-mixed", batches, scaler_args)
    # Replayed like float32: recorded during the first calls, replayed from then on.
    assert step.reason() is None and plain[0].reason() is None
    assert step.stats["replayed"] == plain[0].stats["replayed"] >= STEPS - 4, (step.stats, plain[0].stats)
    # The extra dispatches of 16-mixed: the casts autocast records (at most one per parameter and
    # activation each way), the scaler's scale / inf check / update and Adam's count on the GPU.
    n_params = len(initial)
    assert plain[4] < dispatches <= plain[4] + 4 * n_params + 8, (plain[4], dispatches)

    model, reference, torch_losses = _torch_steps(initial, batches, scaler_args)
    assert not np.isfinite(losses[INF_STEP]) and not np.isfinite(torch_losses[INF_STEP])
    assert scaler.get_scale() == reference.get_scale() != scaler_args["init_scale"]
    assert scaler.state_dict() == reference.state_dict()
    finite = [i for i in range(STEPS) if i != INF_STEP]
    np.testing.assert_allclose(np.array(losses)[finite], np.array(torch_losses)[finite], rtol=1e-4)
    theirs = {name: value.detach().numpy() for name, value in model.state_dict().items()}
    agree = []
    for name, value in task.model.state_dict().items():
        ours = value.numpy()
        assert value.dtype == ag.float32                       # master weights stay float32
        moved = np.abs(theirs[name] - initial[name])
        # Adam moves each weight by about lr per step whatever the gradient's size: f16 rounding
        # (another summation order) can flip the sign of a gradient near zero, so most weights
        # are compared against the distance moved and all of them against a few steps' worth.
        close = np.abs(ours - theirs[name]) <= 1e-4 + 0.05 * moved
        assert close.mean() > 0.95, (name, close.mean())
        agree.append(close.ravel())
        np.testing.assert_allclose(ours, theirs[name], atol=2 * 4e-3 * STEPS)
    assert np.concatenate(agree).mean() > 0.99


def test_sixteen_mixed_resume_gives_the_uninterrupted_weights(capsys, tmp_path):
    """The checkpoint holds the GradScaler's state: a resumed 16-mixed run scales (and skips)
    its steps as the uninterrupted run does, so it ends with the same weights, bit for bit."""
    from anygpu.io import checkpoint

    argv = ["train", "digits", "--precision", "16-mixed", "--no-progress"]   # all 1437 images: 45 steps an epoch
    assert main([*argv, "--epochs", "2", "--out", str(tmp_path / "whole")]) == 0
    assert main([*argv, "--epochs", "1", "--out", str(tmp_path / "parts")]) == 0
    _, header = checkpoint.load_with_metadata(tmp_path / "parts" / "checkpoint.safetensors")
    state = json.loads(header["scaler"])
    # the first epoch backed off from 2**16 (float16 gradients overflowed): a fresh scaler would differ
    assert state["scale"] < 2.0 ** 16 and state["scale"] in {2.0 ** k for k in range(17)}, state
    assert {k: state[k] for k in ("growth_factor", "backoff_factor", "growth_interval")} == \
        {"growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}
    assert main([*argv, "--epochs", "2", "--resume", "--out", str(tmp_path / "parts")]) == 0
    capsys.readouterr()
    whole = (tmp_path / "whole" / "model.safetensors").read_bytes()
    assert (tmp_path / "parts" / "model.safetensors").read_bytes() == whole
    _, plain = checkpoint.load_with_metadata(tmp_path / "whole" / "checkpoint.safetensors")
    _, resumed = checkpoint.load_with_metadata(tmp_path / "parts" / "checkpoint.safetensors")
    assert resumed["scaler"] == plain["scaler"]
