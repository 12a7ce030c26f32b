"""`anygpu train`: every stratagem end to end on tiny data, the files it writes, and exact resume."""

import gzip
import json
import re
import struct

import numpy as np
import pytest
from PIL import Image

from anygpu.cli import main
from anygpu.io import checkpoint, nanosign
from anygpu.io.datasets import load_digits

RESULT_LINE = re.compile(r"^(test accuracy \d\.\d{3}|diffusion train loss \d+\.\d{4} at \d+\.\d\d steps/s) "
                         r"on .+ \(\w+\) in \d+\.\d s$")
FILES = ("model.safetensors", "checkpoint.safetensors", "metrics.json", "loss.png")


def train(capsys, *argv):
    code = main(["train", *argv, "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out.strip().splitlines()


def check_run_folder(out, last_line, epochs, with_test=True):
    for name in FILES:
        assert (out / name).is_file(), name
    assert RESULT_LINE.match(last_line), last_line
    for name in ("model.safetensors", "checkpoint.safetensors"):
        assert nanosign.verify(out / name).status == "verified"
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("epoch", "train_loss", "seconds", "adapter", "steps_per_second"):
        assert key in metrics, key
    assert metrics["epoch"] == epochs
    assert [record["epoch"] for record in metrics["history"]] == list(range(1, epochs + 1))
    assert np.isfinite(metrics["train_loss"])
    if with_test:
        assert 0.0 <= metrics["test_accuracy"] <= 1.0
        assert f"test accuracy {metrics['test_accuracy']:.3f}" in last_line
    with Image.open(out / "loss.png") as plot:
        assert plot.format == "PNG"
    assert not [path.name for path in out.iterdir() if path.name.endswith(".tmp")]
    return metrics


def torch_digits_cnn():
    torch = pytest.importorskip("torch")
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(512, 64), nn.ReLU(), nn.Linear(64, 10),
    )


DIGITS = ("digits", "--limit", "96", "--batch-size", "16", "--seed", "3")


@pytest.fixture(scope="module")
def digits_two_epochs(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits")
    lines = []

    def capture(line):
        lines.append(line)

    from anygpu import train as train_package
    from anygpu.cli import build_parser

    args = build_parser().parse_args(["train", *DIGITS, "--epochs", "2", "--out", str(out), "--no-progress"])
    train_package.run(args, print_line=capture)
    return out, lines


def test_digits_end_to_end(digits_two_epochs):
    out, lines = digits_two_epochs
    metrics = check_run_folder(out, lines[-1], epochs=2)
    assert lines[0].startswith("training digits on ")
    assert metrics["settings"]["seed"] == 3 and metrics["settings"]["limit"] == 96
    arrays, header = checkpoint.load_with_metadata(out / "checkpoint.safetensors")
    assert any(name.startswith("model.") for name in arrays)
    assert any(name.startswith("optim.") for name in arrays)
    assert header["epoch"] == "2" and header["seed"] == "3" and header["stratagem"] == "digits"
    for key in ("scheduler", "rng", "history"):
        json.loads(header[key])


def test_digits_accuracy_matches_torch_on_the_saved_weights(digits_two_epochs):
    """The reported test accuracy, recomputed by PyTorch from model.safetensors."""
    torch = pytest.importorskip("torch")
    out, _ = digits_two_epochs
    net = torch_digits_cnn()
    weights = checkpoint.load(out / "model.safetensors")
    net.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()})
    _, test = load_digits(seed=0)
    with torch.no_grad():
        predicted = net(torch.from_numpy(test.x[:96])).argmax(dim=1).numpy()
    expected = float((predicted == test.y[:96]).mean())
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["test_accuracy"] == pytest.approx(expected, abs=1.5 / 96)


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(capsys, tmp_path, digits_two_epochs):
    uninterrupted, _ = digits_two_epochs
    train(capsys, *DIGITS, "--epochs", "1", "--out", str(tmp_path))
    lines = train(capsys, *DIGITS[:1], "--epochs", "2", "--resume", "--out", str(tmp_path))
    assert "resuming at epoch 2" in lines[0]
    assert [line for line in lines if line.startswith("epoch ")] == [lines[-3]]  # one epoch trained
    resumed = checkpoint.load(tmp_path / "model.safetensors")
    reference = checkpoint.load(uninterrupted / "model.safetensors")
    assert resumed.keys() == reference.keys()
    for name in reference:
        np.testing.assert_array_equal(resumed[name], reference[name], err_msg=name)
    resumed_optim = checkpoint.load(tmp_path / "checkpoint.safetensors")
    reference_optim = checkpoint.load(uninterrupted / "checkpoint.safetensors")
    for name in reference_optim:
        np.testing.assert_array_equal(resumed_optim[name], reference_optim[name], err_msg=name)
    history = json.loads((tmp_path / "metrics.json").read_text())["history"]
    reference_history = json.loads((uninterrupted / "metrics.json").read_text())["history"]
    assert [r["train_loss"] for r in history] == [r["train_loss"] for r in reference_history]


def test_resume_refuses_a_different_seed(capsys, digits_two_epochs):
    out, _ = digits_two_epochs
    code = main(["train", "digits", "--resume", "--seed", "4", "--epochs", "3", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "--seed 4 differs" in err


def test_resume_of_a_finished_run_trains_nothing(capsys, digits_two_epochs):
    out, _ = digits_two_epochs
    before = (out / "model.safetensors").read_bytes()
    lines = train(capsys, "digits", "--resume", "--out", str(out))
    assert "nothing to train" in "\n".join(lines)
    assert RESULT_LINE.match(lines[-1])
    assert (out / "model.safetensors").read_bytes() == before


def write_idx(path, array):
    array = np.ascontiguousarray(array, dtype=np.uint8)
    blob = struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()
    path.write_bytes(gzip.compress(blob) if path.suffix == ".gz" else blob)


def striped_digits(count, rng):
    """28x28 images whose label is the row of a bright stripe."""
    labels = rng.integers(0, 10, count)
    images = rng.integers(0, 40, (count, 28, 28))
    for image, label in zip(images, labels):
        image[2 + 2 * label: 4 + 2 * label, 4:24] = 255
    return images, labels


def test_mnist_end_to_end(capsys, tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "mnist"
    data.mkdir()
    images, labels = striped_digits(48, rng)
    write_idx(data / "train-images-idx3-ubyte.gz", images[:32])
    write_idx(data / "train-labels-idx1-ubyte", labels[:32])
    write_idx(data / "t10k-images-idx3-ubyte", images[32:])
    write_idx(data / "t10k-labels-idx1-ubyte.gz", labels[32:])
    out = tmp_path / "run"
    lines = train(capsys, "mnist", "--data", str(data), "--epochs", "1", "--batch-size", "16", "--out", str(out))
    check_run_folder(out, lines[-1], epochs=1)
    weights = checkpoint.load(out / "model.safetensors")
    assert weights["0.weight"].shape == (6, 1, 5, 5)  # LeNet's first convolution


def test_classifier_end_to_end(capsys, tmp_path):
    rng = np.random.default_rng(1)
    data = tmp_path / "images"
    for name, colour in (("cats", (220, 40, 40)), ("dogs", (40, 40, 220))):
        (data / name).mkdir(parents=True)
        for i in range(5):
            pixels = (rng.integers(0, 60, (20, 24, 3)) + np.array(colour) * 0.7).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(data / name / f"{i}.png")
    out = tmp_path / "run"
    lines = train(capsys, "classifier", "--data", str(data), "--epochs", "2", "--batch-size", "4",
                  "--out", str(out))
    metrics = check_run_folder(out, lines[-1], epochs=2)
    assert metrics["history"][0]["test_accuracy"] >= 0.0
    header = checkpoint.load_with_metadata(out / "model.safetensors")[1]
    assert json.loads(header["classes"]) == ["cats", "dogs"]
    assert json.loads(header["input_shape"]) == [3, 32, 32]


def test_diffusion_end_to_end(capsys, tmp_path):
    out = tmp_path / "run"
    lines = train(capsys, "diffusion", "--limit", "8", "--batch-size", "4", "--epochs", "1", "--timesteps", "20",
                  "--sample-steps", "3", "--samples", "4", "--width", "8", "--out", str(out))
    metrics = check_run_folder(out, lines[-1], epochs=1, with_test=False)
    assert metrics["steps_per_second"] > 0
    assert "test_accuracy" not in metrics
    with Image.open(out / "samples.png") as grid:
        assert grid.size == (2 * (32 + 2) + 2, 2 * (32 + 2) + 2)
    assert "samples.png" in lines[-2]


def test_diffusion_resume_is_exact(capsys, tmp_path):
    """Per-step schedule, per-step noise: two epochs equal one epoch plus a resumed one."""
    tiny = ("diffusion", "--limit", "8", "--batch-size", "4", "--timesteps", "20", "--sample-steps", "2",
            "--samples", "1", "--width", "8")
    train(capsys, *tiny, "--epochs", "2", "--out", str(tmp_path / "straight"))
    train(capsys, *tiny, "--epochs", "1", "--out", str(tmp_path / "resumed"))
    train(capsys, "diffusion", "--epochs", "2", "--resume", "--out", str(tmp_path / "resumed"))
    straight = checkpoint.load(tmp_path / "straight" / "checkpoint.safetensors")
    resumed = checkpoint.load(tmp_path / "resumed" / "checkpoint.safetensors")
    assert straight.keys() == resumed.keys()
    for name in straight:
        np.testing.assert_array_equal(resumed[name], straight[name], err_msg=name)
    assert (tmp_path / "straight" / "samples.png").read_bytes() == (tmp_path / "resumed" / "samples.png").read_bytes()


def test_diffusion_on_an_image_folder(capsys, tmp_path):
    data = tmp_path / "sprites"
    data.mkdir()
    rng = np.random.default_rng(2)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(data / f"s{i}.png")
    out = tmp_path / "run"
    lines = train(capsys, "diffusion", "--data", str(data), "--batch-size", "2", "--epochs", "1", "--timesteps", "10",
                  "--sample-steps", "2", "--samples", "1", "--width", "8", "--out", str(out))
    assert "3 images from" in lines[0]
    check_run_folder(out, lines[-1], epochs=1, with_test=False)


def test_diffusion_schedule_and_embedding():
    from anygpu.train.diffusion import linear_betas, sinusoidal_embedding

    betas = linear_betas(1000)
    assert betas[0] == pytest.approx(1e-4) and betas[-1] == pytest.approx(0.02)
    # Any T ends at about the same total noise as DDPM's T = 1000 (alpha_bar_T ~ 4e-5).
    for timesteps in (200, 1000):
        assert np.prod(1 - linear_betas(timesteps)) == pytest.approx(4.0e-5, rel=0.5)
    features = sinusoidal_embedding(np.array([0, 7]), 8)
    frequencies = 10000.0 ** (-np.arange(4) / 4)
    np.testing.assert_allclose(features[1], np.concatenate([np.sin(7 * frequencies), np.cos(7 * frequencies)]),
                               rtol=1e-6)
    np.testing.assert_array_equal(features[0], [0, 0, 0, 0, 1, 1, 1, 1])


def torch_tiny_unet(width):
    """The documented TinyUNet, written independently in PyTorch with the same parameter names."""
    torch = pytest.importorskip("torch")
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, cin, cout, tdim):
            super().__init__()
            self.norm1, self.conv1 = nn.GroupNorm(8, cin), nn.Conv2d(cin, cout, 3, padding=1)
            self.time = nn.Linear(tdim, cout)
            self.norm2, self.conv2 = nn.GroupNorm(8, cout), nn.Conv2d(cout, cout, 3, padding=1)
            self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else None

        def forward(self, x, t):
            h = self.conv1(F.silu(self.norm1(x))) + self.time(t)[:, :, None, None]
            h = self.conv2(F.silu(self.norm2(h)))
            return h + (x if self.skip is None else self.skip(x))

    class Net(nn.Module):
        def __init__(self, w):
            super().__init__()
            tdim = 4 * w
            self.time_mlp = nn.Sequential(nn.Linear(w, tdim), nn.SiLU(), nn.Linear(tdim, tdim))
            self.stem = nn.Conv2d(3, w, 3, padding=1)
            self.enc1, self.down1 = Block(w, w, tdim), nn.Conv2d(w, w, 3, stride=2, padding=1)
            self.enc2, self.down2 = Block(w, 2 * w, tdim), nn.Conv2d(2 * w, 2 * w, 3, stride=2, padding=1)
            self.mid, self.dec2, self.dec1 = Block(2 * w, 2 * w, tdim), Block(4 * w, 2 * w, tdim), Block(3 * w, w, tdim)
            self.norm_out, self.head = nn.GroupNorm(8, w), nn.Conv2d(w, 3, 3, padding=1)

        def forward(self, x, features):
            t = F.silu(self.time_mlp(features))
            s1 = self.enc1(self.stem(x), t)
            s2 = self.enc2(self.down1(s1), t)
            h = self.mid(self.down2(s2), t)
            h = self.dec2(torch.cat([F.interpolate(h, scale_factor=2), s2], 1), t)
            h = self.dec1(torch.cat([F.interpolate(h, scale_factor=2), s1], 1), t)
            return self.head(F.silu(self.norm_out(h)))

    return Net(width)


def test_diffusion_unet_matches_pytorch():
    torch = pytest.importorskip("torch")
    import anygpu as ag
    from anygpu.train.diffusion import TinyUNet, sinusoidal_embedding

    ag.manual_seed(0)
    net = TinyUNet(3, 8)
    reference = torch_tiny_unet(8)
    weights = {name: value.numpy() for name, value in net.state_dict().items()}
    reference.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()})
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 16, 16), dtype=np.float32)
    features = sinusoidal_embedding(np.array([3, 150]), 8)
    with ag.no_grad():
        got = net(ag.tensor(x), ag.tensor(features)).numpy()
    with torch.no_grad():
        expected = reference(torch.from_numpy(x), torch.from_numpy(features)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
