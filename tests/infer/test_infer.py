"""`anygpu predict`, `eval`, `sample` and `info --measure`: on a small classifier trained here,
on the bundled starter model, and on damaged model files."""

import contextlib
import io
import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

import anygpu as ag
from anygpu.cli import main
from anygpu.infer import starter_model_path
from anygpu.io import checkpoint, nanosign
from anygpu.io.datasets import load_image_folder
from anygpu.train import modelfile

COLOURS = {"blue": (40, 40, 220), "green": (40, 200, 40), "red": (220, 40, 40)}


def write_images(folder, per_class, seed):
    """Noisy images of one colour per class folder, 10x12 (not square: predict crops them)."""
    rng = np.random.default_rng(seed)
    for name, colour in COLOURS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            pixels = (rng.integers(0, 90, (10, 12, 3)) + np.array(colour) * 0.6).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(folder / name / f"{i}.png")


def run_main(capsys, *argv):
    code = main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(err, code, expected_code=2):
    assert code == expected_code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("anygpu: error: "), err
    assert "Traceback" not in err


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 3-class colour classifier at 8x8, trained for a few epochs; (run folder, data folder
    with train/ (8 images a class) and test/ (3 a class) splits)."""
    root = tmp_path_factory.mktemp("classifier")
    data = root / "data"
    write_images(data / "train", 8, seed=0)
    write_images(data / "test", 3, seed=1)
    out = root / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(["train", "classifier", "--data", str(data), "--size", "8", "--epochs", "4", "--batch-size", "4",
                     "--lr", "0.01", "--out", str(out), "--no-progress"])
    assert code == 0
    return out, data


# --------------------------------------------------------------------------- model files


def test_model_file_describes_itself(trained):
    out, data = trained
    model = modelfile.read(out / "model.safetensors")
    assert model.stratagem == "classifier" and model.is_classifier
    assert model.architecture == {"name": "small_cnn", "channels": 3, "size": 8, "classes": 3}
    assert model.input_shape == (3, 8, 8)
    assert model.classes == sorted(COLOURS)
    train, _ = load_image_folder(data, size=8)  # the loader training used: its constants
    np.testing.assert_array_equal(np.float32(model.preprocess["mean"]), train.mean)
    np.testing.assert_array_equal(np.float32(model.preprocess["std"]), train.std)
    assert model.preprocess["color"] == "RGB" and model.preprocess["range"] == [0.0, 1.0]
    header = checkpoint.load_with_metadata(out / "model.safetensors")[1]
    for key in ("architecture", "input_shape", "preprocess", "classes"):
        json.loads(header[key])  # plain JSON strings


def test_starter_model_is_bundled_signed_and_about_a_million_parameters():
    path = starter_model_path()
    assert nanosign.verify(path).status == "verified"
    model = modelfile.read(path)
    assert model.stratagem == "diffusion" and model.architecture["name"] == "tiny_unet"
    parameters = sum(int(np.prod(array.shape)) for array in model.weights.values())
    assert 0.8e6 <= parameters <= 1.2e6
    assert model.input_shape == (3, 32, 32)
    betas = model.betas()
    assert len(betas) == model.diffusion["timesteps"] and np.all(np.diff(betas) > 0)


def _rewrite_header(source, target, change):
    arrays, header = checkpoint.load_with_metadata(source)
    change(header)
    checkpoint.save(arrays, target, metadata=header)


@pytest.mark.parametrize("change, message", [
    (lambda h: h.pop("format"), "does not describe itself"),
    (lambda h: h.update(architecture='{"name": "small_cnn", "channels": 3, "size": 8, "classes": -3}'), "architecture"),
    (lambda h: h.update(architecture='{"name": "resnet9000"}'), "architecture"),
    (lambda h: h.update(classes='["blue", "green"]'), "classes"),
    (lambda h: h.update(preprocess='{"color": "RGB"'), "not valid JSON"),
    (lambda h: h.update(input_shape="[3, 8]"), "input_shape"),
    (lambda h: h.update(input_shape="[3, 16, 16]"), "input_shape"),
    (lambda h: h.update(stratagem="gan"), "stratagem"),
])
def test_damaged_or_old_model_files_are_one_line_errors(capsys, trained, tmp_path, change, message):
    out, data = trained
    bad = tmp_path / "bad.safetensors"
    _rewrite_header(out / "model.safetensors", bad, change)
    code, _, err = run_main(capsys, "predict", bad, data / "train" / "red" / "0.png")
    assert_one_line_error(err, code)
    assert message in err


def test_weights_that_do_not_fit_the_architecture_are_refused(capsys, trained, tmp_path):
    out, data = trained
    bad = tmp_path / "bad.safetensors"
    arrays, header = checkpoint.load_with_metadata(out / "model.safetensors")
    arrays.pop(sorted(arrays)[0])
    checkpoint.save(arrays, bad, metadata=header)
    code, _, err = run_main(capsys, "predict", bad, data / "train" / "red" / "0.png")
    assert_one_line_error(err, code)
    assert "do not fit" in err


# --------------------------------------------------------------------------- predict


def test_predict_labels_new_images(capsys, trained, tmp_path):
    out, _ = trained
    fresh = tmp_path / "fresh"
    write_images(fresh, 4, seed=7)
    code, text, err = run_main(capsys, "predict", out / "model.safetensors", fresh)
    assert code == 0, err
    lines = text.strip().splitlines()
    assert len(lines) == 12
    right = 0
    for line in lines:
        path, label, probability = line.split("\t")
        assert 0.0 <= float(probability) <= 1.0
        right += os.path.basename(os.path.dirname(path)) == label
    assert right >= 10, text


def test_predict_reads_files_as_training_did(capsys, trained):
    """Probabilities of predict on the training images = softmax of the network on the
    inputs that training's own loader made from them (train/ in class, then path, order)."""
    out, data = trained
    files = [str(path) for name in sorted(COLOURS) for path in sorted((data / "train" / name).glob("*.png"))]
    code, text, err = run_main(capsys, "predict", out / "model.safetensors", *files, "--json", "--top-k", "3")
    assert code == 0, err
    results = json.loads(text)
    assert [entry["path"] for entry in results] == files
    train, _ = load_image_folder(data, size=8)
    network = modelfile.read(out / "model.safetensors").build()
    with ag.no_grad():
        logits = network(ag.tensor(train.x)).numpy().astype(np.float64)
    reference = np.exp(logits - logits.max(axis=1, keepdims=True))
    reference /= reference.sum(axis=1, keepdims=True)
    for row, entry in enumerate(results):
        got = {item["label"]: item["probability"] for item in entry["top_k"]}
        for k, name in enumerate(sorted(COLOURS)):
            assert got[name] == pytest.approx(reference[row, k], abs=1e-5)


def test_predict_json_schema_and_top_k(capsys, trained):
    out, data = trained
    code, text, err = run_main(capsys, "predict", out / "model.safetensors", data / "train" / "green", "--json",
                               "--top-k", "2", "--batch-size", "3")
    assert code == 0, err
    entries = json.loads(text)
    assert len(entries) == 8
    for entry in entries:
        assert set(entry) == {"path", "label", "probability", "top_k"}
        assert len(entry["top_k"]) == 2
        assert all(set(item) == {"label", "probability"} for item in entry["top_k"])
        assert entry["label"] == entry["top_k"][0]["label"]
        assert entry["probability"] == entry["top_k"][0]["probability"]
        assert entry["top_k"][0]["probability"] >= entry["top_k"][1]["probability"]
        assert entry["top_k"][0]["label"] != entry["top_k"][1]["label"]
    # K over the number of classes gives every class; their probabilities sum to 1
    code, text, _ = run_main(capsys, "predict", out / "model.safetensors", data / "train" / "green" / "0.png", "--json",
                             "--top-k", "10")
    (entry,) = json.loads(text)
    assert sorted(item["label"] for item in entry["top_k"]) == sorted(COLOURS)
    assert sum(item["probability"] for item in entry["top_k"]) == pytest.approx(1.0, abs=1e-5)
    # text output with K: path, then K label/probability pairs
    code, text, _ = run_main(capsys, "predict", out / "model.safetensors", data / "train" / "green" / "0.png", "--top-k", "3")
    fields = text.strip().split("\t")
    assert len(fields) == 7 and fields[0].endswith("0.png")


def test_predict_tampered_model_exits_1(capsys, trained, tmp_path):
    out, data = trained
    tampered = tmp_path / "model.safetensors"
    shutil.copy(out / "model.safetensors", tampered)
    blob = bytearray(tampered.read_bytes())
    blob[len(blob) // 2] ^= 0x01
    tampered.write_bytes(bytes(blob))
    code, text, err = run_main(capsys, "predict", tampered, data / "train" / "red" / "0.png")
    assert_one_line_error(err, code, expected_code=1)
    assert text == ""


def test_predict_bad_inputs_exit_2(capsys, trained, tmp_path):
    out, data = trained
    model = out / "model.safetensors"
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("hello, not a PNG")
    empty = tmp_path / "empty"
    empty.mkdir()
    unsigned = tmp_path / "unsigned.safetensors"
    unsigned.write_bytes(nanosign.strip_bytes(model.read_bytes()))
    for argv in ([model, not_an_image], [model, data / "train" / "red" / "0.png", not_an_image], [model, tmp_path / "nope.png"],
                 [model, empty], [starter_model_path(), data / "train" / "red" / "0.png"], [unsigned, data / "train" / "red" / "0.png"],
                 [model], [model, data, "--top-k", "0"], [data, data]):
        code, text, err = run_main(capsys, "predict", *argv)
        assert_one_line_error(err, code)
        assert text == ""


# --------------------------------------------------------------------------- eval


def test_eval_equals_the_training_runs_test_numbers(capsys, trained):
    out, data = trained
    metrics = json.loads((out / "metrics.json").read_text())
    code, text, err = run_main(capsys, "eval", out / "model.safetensors", "--data", data, "--json")
    assert code == 0, err
    result = json.loads(text)
    assert result["accuracy"] == metrics["test_accuracy"]
    assert result["loss"] == pytest.approx(metrics["test_loss"], rel=1e-6)
    assert result["images"] == 9 and result["split"] == "test"
    code, text, _ = run_main(capsys, "eval", out / "model.safetensors", "--data", data)
    assert code == 0 and text.startswith(f"accuracy {metrics['test_accuracy']:.4f}, loss ")
    code, text, _ = run_main(capsys, "eval", out / "model.safetensors", "--data", data, "--split", "all", "--json")
    assert json.loads(text)["images"] == 33


def test_eval_bad_inputs(capsys, trained, tmp_path):
    out, data = trained
    other = tmp_path / "other"
    write_images(other, 2, seed=3)
    (other / "purple").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(other / "purple" / "0.png")
    for argv in (["eval", out / "model.safetensors"],                      # a classifier model needs --data
                 ["eval", out / "model.safetensors", "--data", other],     # a class the model does not know
                 ["eval", starter_model_path(), "--data", data],           # not a classifier
                 ["eval", out / "model.safetensors", "--data", tmp_path / "nothing"]):
        code, _, err = run_main(capsys, *argv)
        assert_one_line_error(err, code)


# --------------------------------------------------------------------------- sample


def _pixels(path):
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_sample_from_the_bundled_model_is_deterministic_by_seed(capsys, tmp_path):
    first, again, other = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"
    for path, seed in ((first, 0), (again, 0), (other, 1)):
        code, text, err = run_main(capsys, "sample", "-n", "2", "--steps", "2", "--seed", seed, "--out", path)
        assert code == 0, err
        assert text.startswith(f"wrote {path}: 2 samples of starter_sprites.safetensors, 2 DDIM steps")
    grid = _pixels(first)
    assert grid.shape == (2 + 32 + 2, 2 * (32 + 2) + 2, 3)
    np.testing.assert_array_equal(grid, _pixels(again))
    assert np.abs(grid.astype(int) - _pixels(other).astype(int)).mean() > 5
    assert grid[2:34, 2:34].std() > 10  # a picture, not a flat tile


def test_sample_bad_inputs(capsys, trained, tmp_path):
    out, _ = trained
    for argv in (["sample", out / "model.safetensors", "--out", tmp_path / "x.png"],   # a classifier
                 ["sample", "-n", "0"], ["sample", "--steps", "-1"], ["sample", "--seed", "x"],
                 ["sample", "-n", "100000"], ["sample", tmp_path / "missing.safetensors"],
                 ["sample", "--out", tmp_path]):
        code, _, err = run_main(capsys, *argv)
        assert_one_line_error(err, code)
    assert not (tmp_path / "x.png").exists()


# --------------------------------------------------------------------------- info --measure


def test_info_measure_prints_a_table_and_caches_it(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    code, text, err = run_main(capsys, "info", "--measure")
    assert code == 0, err
    infos = ag.devices()
    # Every adapter gets a row; one that cannot run the suite (an H200 host's OpenGL adapter:
    # no compute shaders) says "unusable: <why>" instead of numbers.
    table = text.split("measured (suite: ", 1)[1]
    rows = [line for line in table.splitlines() if line[4:5] == "["]
    assert len(rows) == len(infos)
    measured = [line for line in rows if "measured" in line]
    assert measured and all("measured" in line or "unusable: " in line for line in rows)
    for line in measured:
        gflops, bandwidth, dispatch, suite = (float(v) for v in line[48:].split()[:4])
        assert gflops > 0 and bandwidth > 0 and dispatch > 0 and suite > 0
    cache = json.loads((tmp_path / "adapters.json").read_text())
    usable = [i for i, line in zip(infos, rows) if "measured" in line]
    assert len(cache) == len({(i.name, i.backend, i.type, i.driver, i.vendor_id, i.device_id) for i in usable})
    for entry in cache.values():
        assert entry["correct"] is True  # the suite's matmul matched NumPy
    assert "fastest (+): adapter [" in text

    monkeypatch.setenv("ANYGPU_ADAPTER", "fastest")
    code, text, err = run_main(capsys, "info")
    assert code == 0, err
    chosen = next(line for line in text.splitlines() if line.startswith("chosen (*)"))
    assert "ANYGPU_ADAPTER=fastest; fastest by measurement" in chosen and "(cached " in chosen


def test_a_trained_diffusion_model_samples_with_its_own_schedule(capsys, tmp_path):
    from anygpu.train.diffusion import TinyUNet, linear_betas

    out = tmp_path / "run"
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "diffusion", "--limit", "4", "--batch-size", "4", "--epochs", "1", "--timesteps", "20",
                     "--sample-steps", "2", "--samples", "1", "--width", "8", "--out", str(out), "--no-progress"]) == 0
    model = modelfile.read(out / "model.safetensors")
    assert model.architecture == {"name": "tiny_unet", "channels": 3, "width": 8, "time_dim": 32}
    np.testing.assert_allclose(model.betas(), linear_betas(20), rtol=1e-15)
    assert set(model.build().state_dict()) == set(TinyUNet(3, 8).state_dict())
    code, text, err = run_main(capsys, "sample", out / "model.safetensors", "-n", "1", "--steps", "500",
                               "--out", tmp_path / "one.png")
    assert code == 0, err
    assert "1 samples of model.safetensors, 20 DDIM steps" in text  # at most T steps
    assert _pixels(tmp_path / "one.png").shape == (36, 36, 3)
