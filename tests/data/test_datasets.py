"""Tests for anygpu.io.datasets: loaders, IDX parsing, sprites, batching, image grids.

References are computed here independently (sklearn's raw digits, IDX bytes packed with
struct, PNGs of known solid colours), never by calling the code under test.
"""

from __future__ import annotations

import gzip
import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from anygpu.io.datasets import (
    DataError,
    Dataset,
    batches,
    load_digits,
    load_image_folder,
    load_mnist,
    load_sprite_folder,
    make_sprites,
    read_idx,
    save_image_grid,
)

# --------------------------------------------------------------------------- digits


def test_digits_shapes_labels_and_split_sizes():
    from sklearn.datasets import load_digits as sklearn_digits

    reference = sklearn_digits()
    train, test = load_digits(test_fraction=0.2, seed=0)
    assert train.x.shape[1:] == (1, 8, 8) and test.x.shape[1:] == (1, 8, 8)
    assert train.x.dtype == np.float32 and train.y.dtype == np.int64
    assert len(train) + len(test) == len(reference.target) == 1797
    assert train.classes == [str(k) for k in range(10)] == test.classes
    # stratified: each class contributes round(n * 0.2) samples to the test split
    for label, count in Counter(reference.target.tolist()).items():
        assert int((test.y == label).sum()) == round(count * 0.2)
        assert int((train.y == label).sum()) == count - round(count * 0.2)


def test_digits_split_is_a_partition_of_the_raw_data():
    from sklearn.datasets import load_digits as sklearn_digits

    reference = sklearn_digits()
    train, test = load_digits(seed=3)
    recovered = []
    for part in (train, test):
        pixels = part.x * part.std[0] + part.mean[0]  # back to [0, 1]
        levels = np.rint(pixels.reshape(len(part), 64) * 16).astype(int)
        assert np.allclose(pixels.reshape(len(part), 64) * 16, levels, atol=1e-4)
        recovered += [(tuple(row), int(label)) for row, label in zip(levels, part.y)]
    expected = [
        (tuple(row), int(label))
        for row, label in zip(reference.data.astype(int), reference.target)
    ]
    assert Counter(recovered) == Counter(expected)


def test_digits_standardized_with_train_statistics():
    from sklearn.datasets import load_digits as sklearn_digits

    train, test = load_digits(seed=0)
    assert abs(float(train.x.mean())) < 1e-5
    assert abs(float(train.x.std()) - 1.0) < 1e-4
    # the constants are the raw [0, 1] train pixels' mean and std
    pixels = sklearn_digits().images / 16.0
    train_pixels = train.x * train.std[0] + train.mean[0]
    assert np.isclose(train.mean[0], train_pixels.mean(), atol=1e-5)
    assert 0.2 < train.mean[0] < 0.4 and np.isclose(train.mean[0], pixels.mean(), atol=0.01)
    assert np.array_equal(test.mean, train.mean) and np.array_equal(test.std, train.std)


def test_digits_split_deterministic_per_seed():
    first_train, first_test = load_digits(seed=7)
    again_train, again_test = load_digits(seed=7)
    other_train, _ = load_digits(seed=8)
    assert np.array_equal(first_train.x, again_train.x)
    assert np.array_equal(first_test.y, again_test.y)
    assert not np.array_equal(first_train.y, other_train.y)


def test_digits_rejects_bad_fraction():
    with pytest.raises(ValueError):
        load_digits(test_fraction=1.0)


# --------------------------------------------------------------------------- IDX / MNIST


def idx_bytes(array: np.ndarray) -> bytes:
    """IDX encoding of a uint8 array, written from the format description."""
    header = struct.pack(">HBB", 0, 0x08, array.ndim)
    header += struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def write_mnist(
    folder: Path, names: dict[str, str], n_train=12, n_test=5, side=6, gz=False, seed=0
):
    """Write a tiny MNIST-layout set; returns the raw uint8 arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, side, side), dtype=np.uint8),
        "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, (n_test, side, side), dtype=np.uint8),
        "test_labels": (np.arange(n_test) % 10).astype(np.uint8),
    }
    folder.mkdir(parents=True, exist_ok=True)
    for key, name in names.items():
        blob = idx_bytes(arrays[key])
        if gz:
            (folder / (name + ".gz")).write_bytes(gzip.compress(blob))
        else:
            (folder / name).write_bytes(blob)
    return arrays


STANDARD_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
DOTTED_NAMES = {
    "train_images": "train-images.idx3-ubyte",
    "train_labels": "train-labels.idx1-ubyte",
    "test_images": "t10k-images.idx3-ubyte",
    "test_labels": "t10k-labels.idx1-ubyte",
}


def test_read_idx_raw_and_gz(tmp_path):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a").write_bytes(idx_bytes(array))
    (tmp_path / "b.gz").write_bytes(gzip.compress(idx_bytes(array)))
    assert np.array_equal(read_idx(tmp_path / "a"), array)
    assert np.array_equal(read_idx(tmp_path / "b.gz"), array)


@pytest.mark.parametrize(
    "names,gz",
    [(STANDARD_NAMES, False), (STANDARD_NAMES, True), (DOTTED_NAMES, False), (DOTTED_NAMES, True)],
)
def test_load_mnist_layouts(tmp_path, names, gz):
    raw = write_mnist(tmp_path, names, gz=gz)
    train, test = load_mnist(tmp_path)
    assert train.x.shape == (12, 1, 6, 6) and test.x.shape == (5, 1, 6, 6)
    assert train.x.dtype == np.float32 and train.y.dtype == np.int64
    assert np.array_equal(train.y, raw["train_labels"])
    assert np.array_equal(test.y, raw["test_labels"])
    assert train.classes == [str(k) for k in range(10)]
    unit_train = raw["train_images"].astype(np.float64) / 255.0
    mean, std = unit_train.mean(), unit_train.std()
    assert np.allclose(train.mean, [mean]) and np.allclose(train.std, [std])
    expected_test = (raw["test_images"].astype(np.float64) / 255.0 - mean) / std
    assert np.allclose(test.x[:, 0], expected_test, atol=1e-5)
    assert abs(float(train.x.mean())) < 1e-5 and abs(float(train.x.std()) - 1.0) < 1e-4


def test_load_mnist_missing_dir_and_file(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_mnist(tmp_path / "nowhere")
    write_mnist(tmp_path, STANDARD_NAMES)
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match="t10k-labels-idx1-ubyte"):
        load_mnist(tmp_path)


def test_idx_bad_magic(tmp_path):
    write_mnist(tmp_path, STANDARD_NAMES)
    path = tmp_path / "train-images-idx3-ubyte"
    blob = bytearray(path.read_bytes())
    blob[2] = 0x0D  # float dtype code
    path.write_bytes(bytes(blob))
    with pytest.raises(DataError, match="train-images-idx3-ubyte.*magic"):
        load_mnist(tmp_path)


def test_idx_truncated_and_trailing(tmp_path):
    write_mnist(tmp_path, STANDARD_NAMES)
    path = tmp_path / "t10k-images-idx3-ubyte"
    blob = path.read_bytes()
    path.write_bytes(blob[:-7])
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte.*truncated"):
        load_mnist(tmp_path)
    path.write_bytes(blob[:9])  # cut inside the dimension header
    with pytest.raises(DataError, match="truncated"):
        load_mnist(tmp_path)
    path.write_bytes(blob + b"\x00\x00")
    with pytest.raises(DataError, match="trailing"):
        load_mnist(tmp_path)


def test_idx_corrupt_gzip(tmp_path):
    write_mnist(tmp_path, STANDARD_NAMES, gz=True)
    path = tmp_path / "train-labels-idx1-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-6])
    with pytest.raises(DataError, match="train-labels-idx1-ubyte.gz"):
        load_mnist(tmp_path)


def test_idx_label_count_mismatch(tmp_path):
    write_mnist(tmp_path, STANDARD_NAMES)
    (tmp_path / "train-labels-idx1-ubyte").write_bytes(idx_bytes(np.zeros(11, dtype=np.uint8)))
    with pytest.raises(DataError, match="11 labels.*12 images"):
        load_mnist(tmp_path)


def test_idx_wrong_dimensions(tmp_path):
    write_mnist(tmp_path, STANDARD_NAMES)
    flat_images = np.zeros((12, 36), dtype=np.uint8)
    (tmp_path / "train-images-idx3-ubyte").write_bytes(idx_bytes(flat_images))
    with pytest.raises(DataError, match="expected 3"):
        load_mnist(tmp_path)


# --------------------------------------------------------------------------- image folders

CLASS_COLOURS = {"cat": (200, 30, 40), "dog": (20, 180, 60), "emu": (40, 50, 220)}


def write_png(path: Path, colour, size=(10, 12), mode="RGB"):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, colour).save(path)


def write_class_folder(root: Path, per_class=5):
    for name, colour in CLASS_COLOURS.items():
        for i in range(per_class):
            write_png(root / name / f"img{i}.png", colour)


def test_image_folder_split_and_values(tmp_path):
    write_class_folder(tmp_path, per_class=5)
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    write_png(tmp_path / "dog" / "extra" / "UPPER.PNG", CLASS_COLOURS["dog"])  # nested, upper case
    train, test = load_image_folder(tmp_path, size=8, test_fraction=0.2, seed=0)
    assert train.classes == ["cat", "dog", "emu"] == test.classes
    assert train.x.shape[1:] == (3, 8, 8) and train.x.dtype == np.float32
    assert len(train) + len(test) == 16
    assert sorted(Counter(test.y.tolist()).items()) == [(0, 1), (1, 1), (2, 1)]
    for part in (train, test):
        pixels = part.x * part.std[None, :, None, None] + part.mean[None, :, None, None]
        for image, label in zip(pixels, part.y):
            colour = np.array(CLASS_COLOURS[part.classes[label]]) / 255.0
            assert np.allclose(image, colour[:, None, None], atol=1e-5)
    assert np.allclose(train.x.mean(axis=(0, 2, 3)), 0.0, atol=1e-5)
    assert np.allclose(train.x.std(axis=(0, 2, 3)), 1.0, atol=1e-4)


def test_image_folder_deterministic_per_seed(tmp_path):
    write_class_folder(tmp_path, per_class=6)
    a_train, a_test = load_image_folder(tmp_path, size=4, seed=1)
    b_train, b_test = load_image_folder(tmp_path, size=4, seed=1)
    assert np.array_equal(a_train.x, b_train.x) and np.array_equal(a_test.y, b_test.y)


def test_image_folder_grayscale(tmp_path):
    write_class_folder(tmp_path, per_class=3)
    train, test = load_image_folder(tmp_path, size=5, grayscale=True)
    assert train.x.shape[1:] == (1, 5, 5) and test.x.shape[1:] == (1, 5, 5)
    assert train.mean.shape == (1,)


def test_image_folder_train_test_layout(tmp_path):
    for name, colour in CLASS_COLOURS.items():
        for i in range(3):
            write_png(tmp_path / "train" / name / f"{i}.png", colour)
    write_png(tmp_path / "val" / "emu" / "a.jpg", CLASS_COLOURS["emu"])
    write_png(tmp_path / "val" / "cat" / "b.bmp", CLASS_COLOURS["cat"])
    train, test = load_image_folder(tmp_path, size=6)
    assert train.classes == ["cat", "dog", "emu"]
    assert len(train) == 9 and len(test) == 2
    assert sorted(test.y.tolist()) == [0, 2]
    assert np.array_equal(test.mean, train.mean)


def test_image_folder_unknown_test_class(tmp_path):
    write_class_folder(tmp_path / "train", per_class=2)
    write_png(tmp_path / "test" / "yak" / "0.png", (1, 2, 3))
    with pytest.raises(DataError, match="yak"):
        load_image_folder(tmp_path)


def test_image_folder_corrupt_image_named(tmp_path):
    write_class_folder(tmp_path, per_class=3)
    (tmp_path / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not a png")
    with pytest.raises(DataError, match="broken.png"):
        load_image_folder(tmp_path, size=4)


def test_image_folder_needs_two_classes_and_no_empty_class(tmp_path):
    write_png(tmp_path / "one" / "a.png", (1, 2, 3))
    write_png(tmp_path / "one" / "b.png", (1, 2, 3))
    with pytest.raises(DataError, match="at least 2"):
        load_image_folder(tmp_path)
    (tmp_path / "two").mkdir()
    (tmp_path / "two" / "readme.txt").write_text("no images here")
    with pytest.raises(DataError, match="two.*no images"):
        load_image_folder(tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        load_image_folder(tmp_path / "missing")


def test_sprite_folder(tmp_path):
    write_png(tmp_path / "a.png", (255, 0, 0), size=(8, 8))
    write_png(tmp_path / "deep" / "b.gif", (0, 0, 255), size=(64, 40), mode="RGB")
    # fully transparent, so it must come out black
    write_png(tmp_path / "deep" / "c.png", (0, 255, 0, 0), size=(8, 8), mode="RGBA")
    sprites = load_sprite_folder(tmp_path, size=16)
    assert sprites.shape == (3, 3, 16, 16) and sprites.dtype == np.float32
    assert np.allclose(sprites[0], np.array([1.0, -1.0, -1.0])[:, None, None])  # a.png: red
    assert np.allclose(sprites[1], np.array([-1.0, -1.0, 1.0])[:, None, None], atol=0.02)  # blue
    assert np.allclose(sprites[2], -1.0)  # transparent onto black


def test_sprite_folder_empty(tmp_path):
    (tmp_path / "readme.txt").write_text("nothing")
    with pytest.raises(DataError, match="no images"):
        load_sprite_folder(tmp_path)


# --------------------------------------------------------------------------- sprites


def test_sprites_shape_range_deterministic():
    sprites = make_sprites(24, size=32, seed=5)
    assert sprites.shape == (24, 3, 32, 32) and sprites.dtype == np.float32
    assert sprites.min() >= -1.0 and sprites.max() <= 1.0
    assert np.array_equal(sprites, make_sprites(24, size=32, seed=5))
    assert np.array_equal(sprites[:10], make_sprites(10, size=32, seed=5))
    assert not np.array_equal(sprites, make_sprites(24, size=32, seed=6))


def test_sprites_not_trivial_and_symmetric():
    sprites = make_sprites(40, size=32, seed=0)
    assert np.array_equal(sprites, sprites[..., ::-1])  # left-right mirror image
    assert (sprites.reshape(40, -1).var(axis=1) > 1e-3).all()
    for sprite in sprites:
        colours = np.unique(sprite.reshape(3, -1).T, axis=0)
        assert len(colours) >= 3  # background, outline and at least one body colour
        # a figure on a plain background: the border pixels share one colour
        assert np.unique(sprite[:, 0, :].T, axis=0).shape[0] <= 2
    assert len({sprite.tobytes() for sprite in sprites}) == 40


def test_sprites_other_sizes():
    assert make_sprites(3, size=16, seed=1).shape == (3, 3, 16, 16)
    sprites = make_sprites(3, size=64, seed=1)
    assert np.array_equal(sprites, sprites[..., ::-1])
    assert make_sprites(0).shape == (0, 3, 32, 32)


# --------------------------------------------------------------------------- batches


def test_batches_cover_every_sample_once_with_partial_last():
    x = np.arange(23 * 2, dtype=np.float32).reshape(23, 2)
    y = np.arange(23)
    seen = []
    sizes = []
    for x_batch, y_batch in batches((x, y), 5, shuffle=True, seed=1, epoch=0):
        assert np.array_equal(x_batch[:, 0], y_batch * 2)  # rows stay paired with labels
        seen += y_batch.tolist()
        sizes.append(len(y_batch))
    assert sizes == [5, 5, 5, 5, 3]
    assert sorted(seen) == list(range(23))
    assert seen != list(range(23))


def test_batches_deterministic_per_seed_and_epoch():
    data = Dataset(np.zeros((50, 1, 2, 2), np.float32), np.arange(50), ["a"])

    def order(seed, epoch):
        epoch_batches = batches(data, 8, shuffle=True, seed=seed, epoch=epoch)
        return np.concatenate([y for _, y in epoch_batches])

    assert np.array_equal(order(0, 3), order(0, 3))
    assert not np.array_equal(order(0, 3), order(0, 4))
    assert not np.array_equal(order(0, 3), order(1, 3))
    unshuffled = np.concatenate([y for _, y in batches(data, 8, shuffle=False)])
    assert np.array_equal(unshuffled, np.arange(50))


def test_batches_unlabelled_and_bad_arguments():
    x = np.ones((7, 3, 4, 4), np.float32)
    got = list(batches(x, 4, shuffle=False))
    assert [b.shape[0] for b, _ in got] == [4, 3] and all(y is None for _, y in got)
    with pytest.raises(ValueError):
        batches(x, 0)
    with pytest.raises(ValueError):
        batches((x, np.arange(6)), 2)


# --------------------------------------------------------------------------- image grids


def test_save_image_grid_size_and_values(tmp_path):
    images = np.full((10, 3, 8, 6), -1.0, np.float32)
    images[0] = 1.0
    path = save_image_grid(images, tmp_path / "sub" / "grid.png", nrow=4)
    with Image.open(path) as picture:
        assert picture.format == "PNG" and picture.mode == "RGB"
        # 3 rows of 4: width 4 * (6 + 2) + 2, height 3 * (8 + 2) + 2
        assert picture.size == (34, 32)
        pixels = np.asarray(picture)
    assert (pixels[2:10, 2:8] == 255).all()  # first tile: value 1 -> white
    assert (pixels[0:2] == 0).all()  # padding
    assert [p.name for p in path.parent.iterdir()] == ["grid.png"]  # no temp file left


def test_save_image_grid_unit_range_grayscale_default_nrow(tmp_path):
    images = np.full((5, 1, 4, 4), 0.5, np.float32)
    path = save_image_grid(images, tmp_path / "g.png", value_range=(0.0, 1.0))
    with Image.open(path) as picture:
        assert picture.mode == "L"
        assert picture.size == (3 * 6 + 2, 2 * 6 + 2)  # nrow = ceil(sqrt(5)) = 3
        assert np.asarray(picture)[2, 2] == 128
    with pytest.raises(ValueError):
        save_image_grid(np.zeros((2, 2, 4, 4)), tmp_path / "bad.png")
