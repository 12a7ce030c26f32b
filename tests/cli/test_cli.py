"""The `anygpu` command: info, and bad input -> one stderr line, exit code 2, no traceback."""

import os
import subprocess
import sys

import numpy as np
import pytest

import anygpu as ag
from anygpu.cli import main
from anygpu.io import checkpoint, nanosign


def run_main(capsys, *argv):
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_process(*argv, env=None):
    return subprocess.run([sys.executable, "-m", "anygpu", *argv], capture_output=True, text=True,
                          timeout=120, env=env)


def assert_one_line_error(code, err):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("anygpu: error: ")
    assert "Traceback" not in err


def test_info_names_the_chosen_adapter_and_its_limits(capsys, dev):
    code, out, err = run_main(capsys, "info")
    assert code == 0
    assert f"chosen (*): {dev.adapter_name} ({dev.backend}" in out
    assert out.count("*") >= 2  # the mark in the list and in the legend
    for limit in ("max-buffer-size", "max-storage-buffer-binding-size", "max-compute-workgroup-storage-size",
                  "max-compute-invocations-per-workgroup", "max-compute-workgroups-per-dimension"):
        value = dev.limits[limit]
        assert any(line.split()[:2] == [limit, str(value)] for line in out.splitlines()), limit
    assert "features anygpu uses:" in out


def test_python_dash_m_runs_info_without_mesa_noise():
    env = {key: value for key, value in os.environ.items() if key != "XDG_RUNTIME_DIR"}
    result = run_process("info", env=env)
    assert result.returncode == 0, result.stderr
    assert "adapters wgpu sees" in result.stdout
    assert "XDG_RUNTIME_DIR" not in result.stderr


def test_help_and_version_exit_zero(capsys):
    code, out, _ = run_main(capsys, "--help")
    assert code == 0 and "train" in out and "info" in out and "verify" in out
    code, out, _ = run_main(capsys, "--version")
    assert code == 0 and out.startswith("anygpu ")


@pytest.mark.parametrize("argv", [
    [],
    ["frobnicate"],
    ["train"],
    ["train", "nope"],
    ["train", "mnist"],                                   # --data is required
    ["train", "classifier"],
    ["train", "digits", "--epochs", "-1"],
    ["train", "digits", "--epochs", "0"],
    ["train", "digits", "--batch-size", "0"],
    ["train", "digits", "--lr", "-0.1"],
    ["train", "digits", "--lr", "nan"],
    ["train", "digits", "--seed", "-3"],
    ["train", "digits", "--data", "somewhere"],           # digits reads no files
])
def test_bad_arguments(capsys, argv):
    code, _, err = run_main(capsys, *argv)
    assert_one_line_error(code, err)


@pytest.mark.parametrize("stratagem", ["mnist", "classifier", "diffusion"])
def test_missing_data_folder(capsys, tmp_path, stratagem):
    missing = tmp_path / "no-such-folder"
    code, out, err = run_main(capsys, "train", stratagem, "--data", str(missing), "--out", str(tmp_path / "run"))
    assert_one_line_error(code, err)
    assert str(missing) in err and "does not exist" in err


def test_data_that_is_not_mnist(capsys, tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"not an idx file")
    code, _, err = run_main(capsys, "train", "mnist", "--data", str(tmp_path), "--out", str(tmp_path / "run"))
    assert_one_line_error(code, err)


def test_resume_without_checkpoint(capsys, tmp_path):
    code, _, err = run_main(capsys, "train", "digits", "--resume", "--out", str(tmp_path))
    assert_one_line_error(code, err)
    assert "checkpoint.safetensors" in err


def test_resume_from_tampered_checkpoint(capsys, tmp_path):
    path = tmp_path / "checkpoint.safetensors"
    checkpoint.save({"model.weight": np.arange(6, dtype=np.float32)}, path,
                    metadata={"format": "anygpu-checkpoint-1", "stratagem": "digits"})
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    code, _, err = run_main(capsys, "train", "digits", "--resume", "--out", str(tmp_path))
    assert_one_line_error(code, err)
    assert "signature does not match" in err


def test_resume_from_another_stratagem(capsys, tmp_path):
    checkpoint.save({"model.weight": np.zeros(2, np.float32)}, tmp_path / "checkpoint.safetensors",
                    metadata={"format": "anygpu-checkpoint-1", "stratagem": "diffusion"})
    code, _, err = run_main(capsys, "train", "digits", "--resume", "--out", str(tmp_path))
    assert_one_line_error(code, err)
    assert "'diffusion'" in err


@pytest.mark.parametrize("metadata", [
    None,                                                     # not a training checkpoint
    {"format": "anygpu-checkpoint-1", "stratagem": "digits"},  # its settings are missing
    {"format": "anygpu-checkpoint-1", "stratagem": "digits", "settings": "{not json"},
])
def test_resume_from_a_foreign_checkpoint(capsys, tmp_path, metadata):
    checkpoint.save({"model.weight": np.zeros(2, np.float32)}, tmp_path / "checkpoint.safetensors", metadata=metadata)
    code, _, err = run_main(capsys, "train", "digits", "--resume", "--out", str(tmp_path))
    assert_one_line_error(code, err)


def test_resume_from_an_unsigned_checkpoint(capsys, tmp_path):
    path = tmp_path / "checkpoint.safetensors"
    checkpoint.save({"model.weight": np.zeros(2, np.float32)}, path,
                    metadata={"format": "anygpu-checkpoint-1", "stratagem": "digits"})
    nanosign.strip(path)
    code, _, err = run_main(capsys, "train", "digits", "--resume", "--out", str(tmp_path))
    assert_one_line_error(code, err)
    assert "no NanoSign signature" in err


def test_out_is_a_file(capsys, tmp_path):
    target = tmp_path / "a-file"
    target.write_text("x")
    code, _, err = run_main(capsys, "train", "digits", "--limit", "8", "--out", str(target))
    assert_one_line_error(code, err)


def test_errors_in_a_real_process_are_one_line():
    result = run_process("train", "mnist", "--data", "/definitely/not/here")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_nanosign_commands_are_wired(capsys, tmp_path):
    path = tmp_path / "file.bin"
    path.write_bytes(b"hello")
    code, out, _ = run_main(capsys, "sign", str(path))
    assert code == 0
    code, out, _ = run_main(capsys, "verify", str(path))
    assert code == 0 and out.startswith("verified ")
    # BLAKE3 of b"hello", from the reference implementation's test vectors
    assert out.split()[1] == "ea8f163db38682925e4491c5e58d4bb3506ef8c14eb78a86e908c5624a67200f"


def test_device_survives_cli_errors(capsys, dev):
    run_main(capsys, "train", "nope")
    assert ag.tensor([1.0, 2.0]).sum().item() == 3.0
