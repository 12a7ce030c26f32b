"""anygpu.utils.tensorboard.SummaryWriter: every event is read back with TensorBoard's own
reader (EventAccumulator) and compared with what was logged."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import metadata as hparams_metadata
from tensorboard.summary.writer import event_file_writer

import anygpu as ag
from anygpu.cli import main
from anygpu.utils.tensorboard import SummaryWriter

ROOT = Path(__file__).resolve().parents[2]


def read(folder) -> EventAccumulator:
    accumulator = EventAccumulator(str(folder), size_guidance={"scalars": 0, "images": 0, "histograms": 0,
                                                               "tensors": 0})
    accumulator.Reload()
    return accumulator


def png(event) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(event.encoded_image_string)))


def test_scalars_from_every_kind_of_value(tmp_path):
    values = [ag.tensor(0.5), ag.tensor([1.25]), np.float32(2.5), np.array([[3.75]]), torch.tensor(4.0), 5, 6.5]
    with SummaryWriter(tmp_path) as writer:
        assert writer.get_logdir() == str(tmp_path)
        for step, value in enumerate(values):
            writer.add_scalar("loss/train", value, step * 10, walltime=1000.0 + step)
        writer.add_scalar("precise", 1 / 3, 1, new_style=True, double_precision=True)
        with pytest.raises(ValueError, match="add_scalar: expected a single value, got shape \\(2,\\)"):
            writer.add_scalar("bad", ag.tensor([1.0, 2.0]))
        with pytest.raises(ValueError, match="global_step must be an integer"):
            writer.add_scalar("bad", 1.0, 1.5)
    events = read(tmp_path).Scalars("loss/train")
    assert [e.step for e in events] == [0, 10, 20, 30, 40, 50, 60]
    assert [e.value for e in events] == [0.5, 1.25, 2.5, 3.75, 4.0, 5.0, 6.5]
    assert [e.wall_time for e in events] == [1000.0 + i for i in range(7)]
    precise = read(tmp_path).Tensors("precise")[0].tensor_proto
    assert precise.double_val[0] == 1 / 3


def test_add_scalars_writes_one_run_per_key(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        for step in range(3):
            writer.add_scalars("run/loss", {"train": step * 1.0, "test": step * 2.0}, step)
    for key, factor in (("train", 1.0), ("test", 2.0)):
        events = read(tmp_path / f"run_loss_{key}").Scalars("run/loss")
        assert [(e.step, e.value) for e in events] == [(s, s * factor) for s in range(3)]


def test_histograms(tmp_path, rng):
    values = rng.standard_normal(1001).astype(np.float32) * 3
    with SummaryWriter(tmp_path) as writer:
        writer.add_histogram("weights", ag.tensor(values), 7)
        writer.add_histogram("counted", values, 8, bins=13)
        writer.add_histogram("merged", values, 9, bins=100, max_bins=10)
        writer.add_histogram("ints", np.arange(10), 1, bins="auto")
        with pytest.raises(ValueError, match="add_histogram: values hold 1 NaN or infinite"):
            writer.add_histogram("bad", np.array([1.0, np.nan]))
        with pytest.raises(ValueError, match="empty"):
            writer.add_histogram("bad", np.zeros(0))
    accumulator = read(tmp_path)
    data = values.astype(np.float64)
    for tag in ("weights", "counted", "merged"):
        histogram = accumulator.Histograms(tag)[0].histogram_value
        assert histogram.num == 1001 and sum(histogram.bucket) == 1001
        assert histogram.min == pytest.approx(data.min()) and histogram.max == pytest.approx(data.max())
        assert histogram.sum == pytest.approx(data.sum()) and histogram.sum_squares == pytest.approx((data**2).sum())
        assert list(histogram.bucket_limit) == sorted(histogram.bucket_limit)
    counts, edges = np.histogram(data, bins=13)
    counted = accumulator.Histograms("counted")[0].histogram_value
    np.testing.assert_array_equal(counted.bucket, counts)
    np.testing.assert_allclose(counted.bucket_limit, edges[1:])
    assert len(accumulator.Histograms("merged")[0].histogram_value.bucket) <= 10
    weights = accumulator.Histograms("weights")[0]
    assert weights.step == 7
    # TensorFlow's buckets: each limit is 1.1 times the one before on each side of zero
    limits = np.array(weights.histogram_value.bucket_limit)
    positive = limits[(limits > 1e-6) & (limits < data.max())]
    np.testing.assert_allclose(positive[1:] / positive[:-1], 1.1)
    for value in data[:50]:  # each value counted in the bucket whose limit is the first >= it
        index = int(np.searchsorted(limits, value, side="right"))
        assert weights.histogram_value.bucket[min(index, len(limits) - 1)] >= 1


def test_images_and_image_grids(tmp_path, rng):
    chw = rng.random((3, 5, 7)).astype(np.float32)
    gray = rng.random((4, 6)).astype(np.float32)
    hwc8 = rng.integers(0, 256, (5, 7, 4)).astype(np.uint8)
    batch = rng.random((5, 1, 4, 3)).astype(np.float32)
    with SummaryWriter(tmp_path) as writer:
        writer.add_image("chw", ag.tensor(chw), 1)
        writer.add_image("hw", gray, 2, dataformats="HW")
        writer.add_image("hwc", hwc8, 3, dataformats="HWC")
        writer.add_images("batch", batch, 4)
        writer.add_images("nhwc", np.moveaxis(batch, 1, 3), 5, dataformats="NHWC")
        with pytest.raises(ValueError, match="does not match dataformats"):
            writer.add_image("bad", chw, dataformats="HW")
        with pytest.raises(ValueError, match="2 channels"):
            writer.add_image("bad", np.zeros((2, 4, 4)))
    accumulator = read(tmp_path)
    expected = np.clip(np.moveaxis(chw, 0, 2) * 255, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(png(accumulator.Images("chw")[0]), expected)
    assert accumulator.Images("chw")[0].width == 7 and accumulator.Images("chw")[0].height == 5
    np.testing.assert_array_equal(png(accumulator.Images("hw")[0]), (gray * 255).astype(np.uint8))
    np.testing.assert_array_equal(png(accumulator.Images("hwc")[0]), hwc8)
    grid = png(accumulator.Images("batch")[0])  # 5 images: 3 columns, 2 rows
    assert grid.shape == (8, 9)
    for index in range(5):
        row, col = divmod(index, 3)
        np.testing.assert_array_equal(grid[row * 4:(row + 1) * 4, col * 3:(col + 1) * 3],
                                      (batch[index, 0] * 255).astype(np.uint8))
    assert not grid[4:, 6:].any()  # the sixth cell is empty
    np.testing.assert_array_equal(png(accumulator.Images("nhwc")[0]), grid)


def test_figures(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure = plt.figure(figsize=(2, 1.5), dpi=50)
    plt.plot([0, 1], [1, 0], color="red")
    second = plt.figure(figsize=(2, 1.5), dpi=50)
    with SummaryWriter(tmp_path) as writer:
        writer.add_figure("one", figure, 3)
        writer.add_figure("two", [figure, second], 4, close=False)
    image = read(tmp_path).Images("one")[0]
    assert (image.width, image.height, image.step) == (100, 75, 3)
    pixels = png(image)
    assert pixels.shape == (75, 100, 4) and (pixels[..., 0] > 200).any() and (pixels[..., 1] < 50).any()
    both = read(tmp_path).Images("two")[0]
    assert (both.width, both.height) == (200, 75)


def test_text_hparams_and_graph(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        writer.add_text("notes", "first *run*", 2)
        writer.add_hparams({"lr": 0.01, "optimizer": "adam", "batch": 32, "bn": True, "wd": ag.tensor(0.5)},
                           {"accuracy": 0.93, "loss": ag.tensor(0.2)}, hparam_domain_discrete={"batch": [16, 32]},
                           run_name="trial", global_step=5)
        with pytest.raises(ValueError, match="hparam 'f' is a builtin_function_or_method; expected int"):
            writer.add_hparams({"f": print}, {})
    text = read(tmp_path).Tensors("notes/text_summary")[0]
    assert text.step == 2 and text.tensor_proto.string_val == [b"first *run*"]
    assert read(tmp_path).SummaryMetadata("notes/text_summary").plugin_data.plugin_name == "text"
    trial = read(tmp_path / "trial")
    content = trial.PluginTagToContent(hparams_metadata.PLUGIN_NAME)
    start = hparams_metadata.parse_session_start_info_plugin_data(content[hparams_metadata.SESSION_START_INFO_TAG])
    assert start.hparams["lr"].number_value == 0.01 and start.hparams["optimizer"].string_value == "adam"
    assert start.hparams["batch"].number_value == 32 and start.hparams["bn"].bool_value
    assert start.hparams["wd"].number_value == 0.5
    experiment = hparams_metadata.parse_experiment_plugin_data(content[hparams_metadata.EXPERIMENT_TAG])
    assert sorted(info.name for info in experiment.hparam_infos) == ["batch", "bn", "lr", "optimizer", "wd"]
    batch_info = next(info for info in experiment.hparam_infos if info.name == "batch")
    assert [v.number_value for v in batch_info.domain_discrete.values] == [16, 32]
    assert sorted(info.name.tag for info in experiment.metric_infos) == ["accuracy", "loss"]
    end = hparams_metadata.parse_session_end_info_plugin_data(content[hparams_metadata.SESSION_END_INFO_TAG])
    assert end.status == 1  # STATUS_SUCCESS
    assert [(e.step, round(e.value, 6)) for e in trial.Scalars("accuracy")] == [(5, 0.93)]
    assert [(e.step, round(e.value, 6)) for e in trial.Scalars("loss")] == [(5, 0.2)]
    assert read(tmp_path).Tags()["graph"] is False


def test_add_graph_writes_the_traced_forward(tmp_path):
    model = ag.nn.Sequential(ag.nn.Conv2d(1, 2, 3), ag.nn.ReLU(), ag.nn.Flatten(), ag.nn.Linear(2 * 4 * 4, 3))
    model.train()
    with SummaryWriter(tmp_path) as writer:
        writer.add_graph(model, ag.randn(2, 1, 6, 6))
        with pytest.warns(UserWarning, match="add_graph writes nothing: the forward could not be traced"):
            writer.add_graph(model, ag.randn(2, 5))  # a shape the convolution refuses
    assert model.training  # traced in eval mode, then put back
    accumulator = read(tmp_path)
    assert accumulator.Tags()["graph"] is True
    nodes = {node.name: node for node in accumulator.Graph().node}
    assert nodes["input_0"].op == "IO Node" and nodes["0/weight"].op == "Parameter"
    assert nodes["0/weight"].attr["shape"].s == b"[2, 1, 3, 3]"
    assert list(nodes["0/Conv"].input) == ["input_0", "0/weight", "0/bias"] and nodes["0/Conv"].op == "Conv"
    assert nodes["3/Gemm"].op == "Gemm" and "3/weight" in nodes["3/Gemm"].input
    assert [node.op for node in nodes.values() if node.name.startswith("output")] == ["IO Node"]
    script = """
import sys, warnings
sys.modules["onnx"] = None
import anygpu as ag
from anygpu.utils.tensorboard import SummaryWriter
with SummaryWriter(sys.argv[1]) as writer, warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    writer.add_graph(ag.nn.Linear(2, 2), ag.zeros(1, 2))
print(caught[0].message)
"""
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "no_onnx")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "add_graph writes nothing" in done.stdout and "anygpu[onnx]" in done.stdout


def test_flush_close_purge_and_default_folder(tmp_path, monkeypatch):
    writer = SummaryWriter(tmp_path / "live", flush_secs=10_000, max_queue=1000)
    writer.add_scalar("x", 1.0, 0)
    writer.flush()
    assert [e.value for e in read(tmp_path / "live").Scalars("x")] == [1.0]  # readable before close
    writer.close()
    writer.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        writer.add_scalar("x", 2.0, 1)
    with SummaryWriter(tmp_path / "purge") as first:
        for step in range(10):
            first.add_scalar("x", float(step), step)
    # tensorboard's EventFileWriter names a file "events.out.tfevents.<seconds>.<host>.<pid>.<uid>"
    # and a reader takes a folder's files in name order: two files made in one second are ordered
    # by a process-wide counter compared as text ("10" before "9" once a process has made ten
    # writers, as a test worker has). So the second file is named 5 seconds later, as a resumed run
    # is. torch's SummaryWriter has the same naming (the same EventFileWriter); ours keeps it.
    later = SimpleNamespace(**vars(time))
    later.time = lambda: time.time() + 5.0
    with monkeypatch.context() as patch:
        patch.setattr(event_file_writer, "time", later)  # that module's `time`, not the global one
        with SummaryWriter(tmp_path / "purge", purge_step=5, filename_suffix=".second") as second:
            for step in range(5, 8):
                second.add_scalar("x", step + 0.5, step)
    assert any(name.endswith(".second") for name in os.listdir(tmp_path / "purge"))
    events = read(tmp_path / "purge").Scalars("x")
    assert [(e.step, e.value) for e in events] == [(s, float(s)) for s in range(5)] + [(s, s + 0.5)
                                                                                       for s in range(5, 8)]
    monkeypatch.chdir(tmp_path)
    with SummaryWriter(comment="_mine") as default:
        folder = Path(default.get_logdir())
    assert folder.parent.name == "runs" and folder.name.endswith("_mine") and folder.is_dir()


def test_without_the_tensorboard_package_the_error_names_the_extra():
    script = """
import sys
sys.modules["tensorboard"] = None
import anygpu.utils.tensorboard as tb  # importing needs nothing
try:
    tb.SummaryWriter("unused")
except ImportError as error:
    print(error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "anygpu[tensorboard]" in done.stdout


def test_torch_utils_tensorboard_resolves_under_the_compat_import(tmp_path):
    assert ag.utils.tensorboard.SummaryWriter is SummaryWriter
    program = tmp_path / "program.py"
    program.write_text(f"""
import torch
from torch.utils.tensorboard import SummaryWriter
writer = SummaryWriter({str(tmp_path / "logs")!r})
model = torch.nn.Linear(3, 1)
for step in range(4):
    loss = model(torch.ones(2, 3)).pow(2).mean()
    writer.add_scalar("Loss/train", loss.item(), step)
writer.add_histogram("weight", model.weight, 0)
writer.close()
print(type(writer).__module__)
""")
    done = subprocess.run([sys.executable, str(ROOT / "tests/compat/torch_shim.py"), "anygpu", str(program)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "anygpu.utils.tensorboard.writer"
    assert len(read(tmp_path / "logs").Scalars("Loss/train")) == 4


def test_train_tensorboard_flag_logs_loss_accuracy_lr_and_throughput(tmp_path, capsys):
    board, out = tmp_path / "board", tmp_path / "run"
    argv = ["train", "digits", "--limit", "64", "--batch-size", "16", "--out", str(out), "--tensorboard", str(board),
            "--no-progress"]
    assert main([*argv, "--epochs", "1"]) == 0, capsys.readouterr().err
    assert main([*argv, "--epochs", "2", "--resume"]) == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    accumulator = read(board)
    steps = 4  # 64 samples in batches of 16
    losses = accumulator.Scalars("train/loss")
    assert [e.step for e in losses] == list(range(1, 2 * steps + 1))
    assert [e.value for e in accumulator.Scalars("train/lr")] == pytest.approx([metrics["lr"]] * 2 * steps)
    for key in ("train_loss", "test_accuracy", "test_loss", "samples_per_second", "lr"):
        events = accumulator.Scalars(f"epoch/{key}")
        assert [e.step for e in events] == [steps, 2 * steps], key
        assert [e.value for e in events] == pytest.approx([record[key] for record in metrics["history"]],
                                                          rel=1e-6), key
    epoch_losses = [np.mean([e.value for e in losses[i * steps:(i + 1) * steps]]) for i in range(2)]
    assert epoch_losses == pytest.approx([record["train_loss"] for record in metrics["history"]], rel=1e-5)


def test_train_tensorboard_without_the_package_is_a_one_line_error(tmp_path):
    script = """
import sys
sys.modules["tensorboard"] = None
from anygpu.cli import main
sys.exit(main(sys.argv[1:]))
"""
    done = subprocess.run([sys.executable, "-c", script, "train", "digits", "--limit", "32", "--epochs", "1",
                           "--out", str(tmp_path / "run"), "--tensorboard", str(tmp_path / "board"), "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.startswith("anygpu: error: --tensorboard: SummaryWriter needs the tensorboard package")
    assert "anygpu[tensorboard]" in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / "run" / "checkpoint.safetensors").exists()
