"""Crash safety of `anygpu train`: real SIGKILLs at named moments, hostile checkpoints, byte-determinism.

A child process runs the command with one os function wrapped so that it kills the
process with SIGKILL at a chosen call (e.g. the 2nd os.replace onto model.safetensors),
with no cleanup code of ours getting a chance to run. The run folder is then resumed
and compared, byte for byte, with a run that was never interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from anygpu.cli import main
from anygpu.io import checkpoint

DIGITS = ["train", "digits", "--limit", "32", "--batch-size", "16", "--seed", "5", "--no-progress"]

# Runs the CLI; KILL_AT="<os function>:<file name>:<n>" SIGKILLs the process at the n-th
# call of that function on that file (for fsync: on its temporary file).
CHILD = textwrap.dedent(
    """
    import os, signal, sys
    point, name, nth = os.environ["KILL_AT"].split(":") if os.environ.get("KILL_AT") else ("", "", "0")
    seen = 0
    if point:
        real = getattr(os, point)
        def hooked(*args, **kwargs):
            global seen
            target = os.path.basename(args[1] if point == "replace" else os.readlink(f"/proc/self/fd/{args[0]}"))
            if target == name or target.startswith("." + name + "."):
                seen += 1
                if seen == int(nth):
                    os.kill(os.getpid(), signal.SIGKILL)
            return real(*args, **kwargs)
        setattr(os, point, hooked)
    from anygpu.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def run_child(args, kill_at=None):
    env = dict(os.environ)
    env.pop("KILL_AT", None)
    if kill_at:
        env["KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True, timeout=600)


def folder_bytes(folder):
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    done = run_child([*DIGITS, "--epochs", "2", "--out", str(out)])
    assert done.returncode == 0, done.stderr
    return out


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd and uses SIGKILL")


@pytest.mark.parametrize(
    "kill_at",
    [
        "replace:model.safetensors:2",  # checkpoint at epoch 2, model/metrics/plot still at 1
        "replace:loss.png:2",  # model and metrics at 2, the plot at 1
        "fsync:checkpoint.safetensors:2",  # killed while the last checkpoint was being written
    ],
)
def test_sigkill_then_resume_gives_the_uninterrupted_files(uninterrupted, tmp_path, kill_at):
    killed = run_child([*DIGITS, "--epochs", "2", "--out", str(tmp_path)], kill_at=kill_at)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    leftovers = [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")]
    assert leftovers, "the kill came before the rename: a temporary file should be left"

    resumed = run_child([*DIGITS[:2], "--resume", "--epochs", "2", "--out", str(tmp_path)])
    assert resumed.returncode == 0, resumed.stderr
    assert not [path.name for path in tmp_path.iterdir() if path.name.endswith(".tmp")]

    # Weights, checkpoint arrays: bit for bit those of the run that was never killed (the
    # model file too, though another process wrote it: saving is byte-deterministic).
    assert (tmp_path / "model.safetensors").read_bytes() == (uninterrupted / "model.safetensors").read_bytes()
    saved, header = checkpoint.load_with_metadata(tmp_path / "checkpoint.safetensors")
    reference = checkpoint.load(uninterrupted / "checkpoint.safetensors")
    assert saved.keys() == reference.keys()
    for name in reference:
        np.testing.assert_array_equal(saved[name], reference[name], err_msg=name)
    # Every output agrees with the newest checkpoint.
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert header["epoch"] == "2" and metrics["epoch"] == 2
    assert metrics["history"] == json.loads(header["history"])
    assert checkpoint.load_with_metadata(tmp_path / "model.safetensors")[1]["epoch"] == "2"
    wrote = [line for line in resumed.stdout.splitlines() if line.startswith("wrote ")]
    assert len(wrote) == 1 and "model.safetensors" in wrote[0] and "metrics.json" in wrote[0]


def test_finished_run_with_missing_outputs_is_rebuilt_from_its_checkpoint(uninterrupted, tmp_path, capsys):
    for name in ("checkpoint.safetensors", "model.safetensors"):
        (tmp_path / name).write_bytes((uninterrupted / name).read_bytes())
    code = main([*DIGITS[:2], "--resume", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "nothing to train" in out
    assert (tmp_path / "model.safetensors").read_bytes() == (uninterrupted / "model.safetensors").read_bytes()
    assert json.loads((tmp_path / "metrics.json").read_text())["history"] == \
        json.loads((uninterrupted / "metrics.json").read_text())["history"]
    assert (tmp_path / "loss.png").is_file()


def test_stale_temporaries_of_dead_processes_go_and_others_stay(uninterrupted, tmp_path, capsys):
    for name in ("checkpoint.safetensors", "model.safetensors", "metrics.json"):
        (tmp_path / name).write_bytes((uninterrupted / name).read_bytes())
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    from anygpu.io.nanosign import _host_tag

    stale = tmp_path / f".model.safetensors.anygpu-{_host_tag()}-{dead_pid}-0123456789ab.tmp"
    live = tmp_path / f".model.safetensors.anygpu-{_host_tag()}-{os.getppid()}-0123456789ab.tmp"
    foreign = tmp_path / ".notes.txt.tmp"  # not ours: never touched
    for path in (stale, live, foreign):
        path.write_bytes(b"x" * 100)
    code = main([*DIGITS[:2], "--resume", "--out", str(tmp_path), "--no-progress"])
    capsys.readouterr()
    assert code == 0
    assert not stale.exists()
    assert live.exists() and foreign.exists()


def resign(path, **changes):
    arrays, header = checkpoint.load_with_metadata(path)
    header.update(changes)
    checkpoint.save(arrays, path, metadata=header)


@pytest.mark.parametrize(
    "changes",
    [
        {"epoch": "1e400"}, {"epoch": "0"}, {"epoch": "-1"}, {"epoch": "٣"}, {"epoch": "99999999999999999999"},
        {"history": "5"}, {"history": "[]"}, {"history": "[{}]"}, {"history": '[{"epoch": 1}]'},
        {"history": '[{"epoch": 1, "train_loss": "low", "samples_per_second": 1, "epoch_seconds": 1, "seconds": 1}]'},
        {"settings": "[]"}, {"settings": "{}"}, {"settings": "nan"}, {"settings": "[" * 100000},
        {"curve": "{}"}, {"curve": "[[1]]"}, {"curve": '[["a", 1]]'},
        {"rng": "{}"}, {"rng": "5"}, {"rng": '{"bit_generator": "PCG64", "state": 5}'},
        {"scheduler": "5"}, {"scheduler": '{"step_size": "x"}'}, {"scheduler": "[1, 2]"},
        {"seed": "4"},
        {"scaler": "5"}, {"scaler": "[]"}, {"scaler": '{"scale": 65536.0}'},
        {"scaler": '{"scale": 0, "growth_factor": 2, "backoff_factor": 0.5, "growth_interval": 9, "_growth_tracker": 0}'},
        {"scaler": '{"scale": 8, "growth_factor": 2, "backoff_factor": 1.5, "growth_interval": 9, "_growth_tracker": 0}'},
    ],
    ids=lambda changes: "-".join(f"{key}={value[:20]}" for key, value in changes.items()),
)
def test_resigned_checkpoint_with_malformed_metadata_is_one_line_exit_2(uninterrupted, tmp_path, capsys, changes):
    for name in ("checkpoint.safetensors", "model.safetensors", "metrics.json", "loss.png"):
        (tmp_path / name).write_bytes((uninterrupted / name).read_bytes())
    resign(tmp_path / "checkpoint.safetensors", **changes)
    before = folder_bytes(tmp_path)
    code = main([*DIGITS[:2], "--resume", "--epochs", "3", "--out", str(tmp_path), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 2, captured
    assert captured.err.startswith("anygpu: error: --resume: ") and captured.err.count("\n") == 1
    assert folder_bytes(tmp_path) == before


def test_settings_with_wrong_types_are_refused(uninterrupted, tmp_path, capsys):
    _, header = checkpoint.load_with_metadata(uninterrupted / "checkpoint.safetensors")
    good = json.loads(header["settings"])
    for key, value in [("lr", 1e400), ("lr", "0.1"), ("batch_size", 0), ("batch_size", True), ("seed", -1),
                       ("epochs", 2.5), ("limit", "64"), ("extra", []), ("data", 5), ("stratagem", "mnist")]:
        (tmp_path / "checkpoint.safetensors").write_bytes((uninterrupted / "checkpoint.safetensors").read_bytes())
        resign(tmp_path / "checkpoint.safetensors", settings=json.dumps({**good, key: value}))
        before = folder_bytes(tmp_path)
        code = main([*DIGITS[:2], "--resume", "--out", str(tmp_path), "--no-progress"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and "settings" in err, (key, value, err)
        assert folder_bytes(tmp_path) == before
