"""Datasets for the `anygpu train` stratagems: pure NumPy and Pillow.

Nothing here touches a GPU. Every loader returns `Dataset` objects whose `x` is float32
with shape (N, C, H, W) and whose `y` is int64 with shape (N,).

Value ranges, by loader:

- `load_digits`, `load_mnist`, `load_image_folder`: pixels are first scaled to [0, 1],
  then standardized per channel with the *train* split's mean and std (population std,
  over N, H and W), so the train set has mean 0 and std 1 per channel. The constants are
  kept in `Dataset.mean` / `Dataset.std` (shape (C,)); `x * std[:, None, None] +
  mean[:, None, None]` gives back the [0, 1] pixels. The test split uses the train
  constants, never its own.
- `make_sprites`, `load_sprite_folder`: plain arrays in [-1, 1] (what a DDPM trains on).

Bad or unreadable data raises `DataError` with a one-line message that names the file
and what is wrong; the command line turns it into exit code 2.
"""

from __future__ import annotations

import colorsys
import gzip
import math
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
from PIL import Image

from anygpu.io import nanosign

__all__ = [
    "DataError",
    "Dataset",
    "IMAGE_EXTENSIONS",
    "batches",
    "image_files",
    "read_images",
    "load_digits",
    "load_image_folder",
    "load_mnist",
    "load_sprite_folder",
    "make_sprites",
    "read_idx",
    "save_image_grid",
]

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp")
"""File suffixes (compared case-insensitively) that the image-folder loaders read."""

# A channel whose train std is below this is left unscaled (std taken as 1) instead of
# being blown up by a division by almost zero.
_MIN_STD = 1e-6


class DataError(ValueError):
    """Unreadable or invalid data; the message is one line naming the file and the fault."""


@dataclass
class Dataset:
    """An in-memory labelled image set.

    Attributes:
        x: float32 images, shape (N, C, H, W).
        y: int64 labels in [0, len(classes)), shape (N,), or None for unlabelled data.
        classes: class names; `classes[k]` is the name of label k.
        mean, std: per-channel constants, shape (C,), that standardized `x` from [0, 1]
            pixels (see the module docstring), or None when `x` was not standardized.
    """

    x: np.ndarray
    y: np.ndarray | None
    classes: list[str]
    mean: np.ndarray | None = None
    std: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.x = np.ascontiguousarray(self.x, dtype=np.float32)
        if self.x.ndim != 4:
            raise ValueError(f"Dataset: x has shape {self.x.shape}, expected (N, C, H, W)")
        if self.y is not None:
            self.y = np.ascontiguousarray(self.y, dtype=np.int64)
            if self.y.shape != (self.x.shape[0],):
                raise ValueError(
                    f"Dataset: y has shape {self.y.shape}, expected ({self.x.shape[0]},) "
                    "to match x"
                )

    def __len__(self) -> int:
        return int(self.x.shape[0])


# --------------------------------------------------------------------------- helpers


def _check_fraction(test_fraction: float) -> float:
    if not 0.0 < float(test_fraction) < 1.0:
        raise ValueError(f"test_fraction must be in (0, 1), got {test_fraction}")
    return float(test_fraction)


def _stratified_split(
    labels: np.ndarray, test_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Split sample indices per class, deterministically for `seed`.

    A class of n >= 2 samples sends min(n - 1, max(1, round(n * test_fraction))) of them
    to the test split, so every class keeps at least one train sample and, when it can
    spare one, appears in the test split too. A class of one sample goes to train.

    Returns (train_idx, test_idx), each sorted ascending, int64.
    """
    rng = np.random.default_rng(seed)
    train_parts, test_parts = [], []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        members = members[rng.permutation(members.size)]
        n = members.size
        n_test = min(n - 1, max(1, round(n * test_fraction))) if n >= 2 else 0
        test_parts.append(members[:n_test])
        train_parts.append(members[n_test:])
    train_idx = np.sort(np.concatenate(train_parts)).astype(np.int64)
    test_idx = np.sort(np.concatenate(test_parts)).astype(np.int64)
    return train_idx, test_idx


def _channel_stats(x_train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of (N, C, H, W) pixels, each float32 of shape (C,)."""
    x64 = x_train.astype(np.float64)
    mean = x64.mean(axis=(0, 2, 3))
    std = x64.std(axis=(0, 2, 3))
    std = np.where(std < _MIN_STD, 1.0, std)
    return mean.astype(np.float32), std.astype(np.float32)


def _standardize_pair(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
    classes: list[str],
) -> tuple[Dataset, Dataset]:
    """Standardize both splits with the train split's per-channel mean/std.

    x_train, x_test: float32 in [0, 1], shape (N, C, H, W).
    """
    mean, std = _channel_stats(x_train)
    shift, scale = mean[None, :, None, None], std[None, :, None, None]
    train = Dataset((x_train - shift) / scale, y_train, list(classes), mean, std)
    test = Dataset((x_test - shift) / scale, y_test, list(classes), mean.copy(), std.copy())
    return train, test


def _require_dir(path: str | os.PathLike, what: str) -> Path:
    root = Path(path)
    if not root.exists():
        raise DataError(f"{root}: {what} directory does not exist")
    if not root.is_dir():
        raise DataError(f"{root}: {what} path is not a directory")
    return root


# --------------------------------------------------------------------------- digits


# The 1797 8x8 digits that scikit-learn bundles (the test set of UCI's "Optical Recognition of
# Handwritten Digits", E. Alpaydin and C. Kaynak, 1998, CC BY 4.0), shipped in the package as
# uint8 pixels 0..16 and labels: anygpu needs no scikit-learn to train on them.
DIGITS_FILE = Path(__file__).with_name("digits.npz")


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> tuple[Dataset, Dataset]:
    """The handwritten digits scikit-learn bundles (1797 images of 8x8, shipped in the package).

    Pixels (0..16 in the source) are scaled to [0, 1], then standardized with the train
    split's mean and std (one channel, so one scalar each). The split is stratified by
    class and deterministic for `seed`.

    Returns:
        (train, test): `x` float32 (N, 1, 8, 8), `y` int64 (N,) in 0..9,
        classes "0".."9"; about `test_fraction` of each class is in test.
    """
    test_fraction = _check_fraction(test_fraction)
    with np.load(DIGITS_FILE, allow_pickle=False) as stored:
        images, labels = stored["images"], stored["labels"].astype(np.int64)
    pixels = (images.astype(np.float32) / 16.0)[:, None, :, :]
    classes = [str(k) for k in range(10)]
    train_idx, test_idx = _stratified_split(labels, test_fraction, seed)
    return _standardize_pair(
        pixels[train_idx], labels[train_idx], pixels[test_idx], labels[test_idx], classes
    )


# --------------------------------------------------------------------------- MNIST / IDX

_IDX_UBYTE = 0x08


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file of unsigned bytes, raw or gzip-compressed (detected by content).

    Format: two zero bytes, a dtype code (only 0x08, unsigned byte, is accepted), the
    number of dimensions, one big-endian uint32 per dimension, then the data, row-major.
    The file must hold exactly that many data bytes.

    Returns:
        uint8 array with the file's dimensions, e.g. (N, 28, 28) or (N,).
    """
    path = Path(path)
    try:
        with nanosign.open_regular(path, "read_idx") as handle:  # a FIFO or device is refused, not read
            blob = handle.read()
    except OSError as exc:
        raise DataError(f"{path}: cannot read file ({exc.strerror or exc})") from None
    if blob[:2] == b"\x1f\x8b":
        try:
            blob = gzip.decompress(blob)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt gzip data ({exc})") from None
    if len(blob) < 4:
        raise DataError(f"{path}: {len(blob)} bytes is too short for an IDX header")
    zero, dtype_code, ndim = struct.unpack(">HBB", blob[:4])
    if zero != 0 or dtype_code != _IDX_UBYTE or ndim == 0:
        raise DataError(
            f"{path}: bad IDX magic number 0x{blob[:4].hex()}, "
            f"expected 0x000008NN (unsigned bytes, NN dimensions)"
        )
    header_len = 4 + 4 * ndim
    if len(blob) < header_len:
        raise DataError(
            f"{path}: truncated IDX header, {len(blob)} bytes but {ndim} dimensions "
            f"need {header_len}"
        )
    dims = struct.unpack(f">{ndim}I", blob[4:header_len])
    expected = header_len + math.prod(dims)
    if len(blob) < expected:
        raise DataError(
            f"{path}: truncated, {len(blob)} bytes but dimensions {dims} need {expected}"
        )
    if len(blob) > expected:
        raise DataError(
            f"{path}: {len(blob) - expected} unexpected trailing bytes after the "
            f"{expected} that dimensions {dims} need"
        )
    return np.frombuffer(blob, dtype=np.uint8, offset=header_len).reshape(dims)


def _find_idx(root: Path, split: str, kind: str, idx_dims: int) -> Path:
    """Locate e.g. train-images-idx3-ubyte under any accepted spelling, raw or .gz."""
    stems = (f"{split}-{kind}-idx{idx_dims}-ubyte", f"{split}-{kind}.idx{idx_dims}-ubyte")
    for stem in stems:
        for name in (stem, stem + ".gz"):
            if (root / name).is_file():
                return root / name
    raise DataError(
        f"{root}: missing {stems[0]} (also looked for {stems[0]}.gz, {stems[1]}, "
        f"{stems[1]}.gz)"
    )


def _read_idx_pair(root: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Read and cross-check one split: images uint8 (N, H, W), labels uint8 (N,)."""
    images_path = _find_idx(root, split, "images", 3)
    labels_path = _find_idx(root, split, "labels", 1)
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.ndim != 3:
        raise DataError(
            f"{images_path}: has {images.ndim} dimensions {images.shape}, "
            "expected 3 (count, rows, columns)"
        )
    if labels.ndim != 1:
        raise DataError(
            f"{labels_path}: has {labels.ndim} dimensions {labels.shape}, expected 1 (count)"
        )
    if images.shape[0] == 0 or images.shape[1] == 0 or images.shape[2] == 0:
        raise DataError(f"{images_path}: holds no pixels, dimensions {images.shape}")
    if labels.shape[0] != images.shape[0]:
        raise DataError(
            f"{labels_path}: has {labels.shape[0]} labels but {images_path.name} "
            f"has {images.shape[0]} images"
        )
    return images, labels


def load_mnist(dir: str | os.PathLike) -> tuple[Dataset, Dataset]:
    """MNIST or Fashion-MNIST from the four IDX files in `dir`.

    Accepted names (each raw or with `.gz`): `train-images-idx3-ubyte`,
    `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`, and
    the dotted spellings such as `train-images.idx3-ubyte`. Pixels are scaled to [0, 1],
    then standardized with the train split's mean and std (for MNIST about 0.1307 and
    0.3081). Classes are "0".."K-1" with K = 1 + the largest train label.

    Returns:
        (train, test): `x` float32 (N, 1, H, W), H = W = 28 for MNIST; `y` int64 (N,).
    """
    root = _require_dir(dir, "MNIST")
    train_images, train_labels = _read_idx_pair(root, "train")
    test_images, test_labels = _read_idx_pair(root, "t10k")
    if test_images.shape[1:] != train_images.shape[1:]:
        raise DataError(
            f"{root}: test images are {test_images.shape[1]}x{test_images.shape[2]} "
            f"but train images are {train_images.shape[1]}x{train_images.shape[2]}"
        )
    n_classes = int(train_labels.max()) + 1
    if int(test_labels.max()) >= n_classes:
        raise DataError(
            f"{root}: test labels go up to {int(test_labels.max())} but train labels "
            f"only to {n_classes - 1}"
        )
    classes = [str(k) for k in range(n_classes)]

    def to_unit(images: np.ndarray) -> np.ndarray:
        return (images.astype(np.float32) / 255.0)[:, None, :, :]

    return _standardize_pair(
        to_unit(train_images), train_labels.astype(np.int64),
        to_unit(test_images), test_labels.astype(np.int64),
        classes,
    )


# --------------------------------------------------------------------------- image folders


def _is_hidden(path: Path, root: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def _image_files(folder: Path) -> list[Path]:
    """Image files under `folder` (recursively), sorted by path; hidden entries skipped."""
    return sorted(
        path for path in folder.rglob("*")
        if path.suffix.lower() in IMAGE_EXTENSIONS
        and path.is_file()
        and not _is_hidden(path, folder)
    )


def _class_dirs(folder: Path) -> list[Path]:
    """Visible sub-folders of `folder`, sorted by name."""
    return sorted(
        (entry for entry in folder.iterdir() if entry.is_dir() and not entry.name.startswith(".")),
        key=lambda entry: entry.name,
    )


def _read_image(path: Path, size: int, mode: str) -> np.ndarray:
    """Decode one image to uint8 (size, size, C), C = 3 for mode "RGB", 1 for "L".

    Transparent pixels are composited onto black; the image is centre-cropped to a square
    (aspect ratio kept) and resized: nearest-neighbour when enlarging, so pixel art stays
    crisp, bilinear with Pillow's antialiasing when shrinking. Animated files give their
    first frame.
    """
    try:
        with Image.open(path) as img:
            img.load()
            if img.mode in ("RGBA", "LA", "PA") or "transparency" in img.info:
                rgba = img.convert("RGBA")
                img = Image.alpha_composite(Image.new("RGBA", rgba.size, (0, 0, 0, 255)), rgba)
            img = img.convert(mode)
            width, height = img.size
            side = min(width, height)
            left, top = (width - side) // 2, (height - side) // 2
            img = img.crop((left, top, left + side, top + side))
            resample = Image.Resampling.NEAREST if side < size else Image.Resampling.BILINEAR
            pixels = np.asarray(img.resize((size, size), resample), dtype=np.uint8)
    # Pillow's decoders raise many exception types on damaged input (OSError, ValueError,
    # SyntaxError, struct.error, DecompressionBombError, ...); every one means "unreadable".
    except Exception as exc:  # noqa: BLE001
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DataError(f"{path}: Pillow cannot read this image ({reason})") from None
    return pixels.reshape(size, size, -1)


def _load_images(paths: Sequence[Path], size: int, mode: str) -> np.ndarray:
    """Decode `paths` into float32 (N, C, size, size) in [0, 1]."""
    channels = 1 if mode == "L" else 3
    out = np.empty((len(paths), channels, size, size), dtype=np.float32)
    for i, path in enumerate(paths):
        out[i] = _read_image(path, size, mode).transpose(2, 0, 1)
    out *= 1.0 / 255.0
    return out


def image_files(folder: str | os.PathLike) -> list[Path]:
    """Every image file under `folder` (recursively, sorted by path, hidden entries skipped),
    as the image-folder loaders see them; suffixes are those of `IMAGE_EXTENSIONS`."""
    return _image_files(Path(folder))


def read_images(paths: Sequence[str | os.PathLike], size: int, mode: str = "RGB") -> np.ndarray:
    """Decode image files the way the image-folder loaders do (transparency onto black,
    centre crop, resize to `size` x `size`, mode "RGB" or "L"): float32 (N, C, size, size)
    in [0, 1]. A file Pillow cannot read raises `DataError` naming it."""
    if mode not in ("RGB", "L"):
        raise ValueError(f"read_images: mode must be 'RGB' or 'L', got {mode!r}")
    return _load_images([Path(path) for path in paths], _check_size(size), mode)


def _check_size(size: int) -> int:
    if int(size) != size or size < 1:
        raise ValueError(f"size must be a positive integer, got {size}")
    return int(size)


def _labelled_files(
    root: Path, classes: list[str] | None
) -> tuple[list[Path], list[int], list[str]]:
    """Collect (files, labels, classes) from a folder of class folders.

    With `classes` None the class folders of `root` define the classes (at least two,
    none empty). With a list (a test folder), each class folder must name a known class;
    missing or empty ones are allowed.
    """
    files: list[Path] = []
    labels: list[int] = []
    if classes is None:
        class_dirs = _class_dirs(root)
        if len(class_dirs) < 2:
            found = ", ".join(d.name for d in class_dirs) or "none"
            raise DataError(
                f"{root}: needs at least 2 class folders of images, found {len(class_dirs)} "
                f"({found})"
            )
        classes = [d.name for d in class_dirs]
        for label, class_dir in enumerate(class_dirs):
            class_files = _image_files(class_dir)
            if not class_files:
                raise DataError(
                    f"{class_dir}: class folder has no images "
                    f"({', '.join(ext[1:] for ext in IMAGE_EXTENSIONS)})"
                )
            files += class_files
            labels += [label] * len(class_files)
    else:
        index = {name: k for k, name in enumerate(classes)}
        for class_dir in _class_dirs(root):
            if class_dir.name not in index:
                raise DataError(
                    f"{class_dir}: class '{class_dir.name}' has no folder in the train split "
                    f"(train classes: {', '.join(classes)})"
                )
            class_files = _image_files(class_dir)
            files += class_files
            labels += [index[class_dir.name]] * len(class_files)
        if not files:
            raise DataError(f"{root}: test split has no images in class folders")
    return files, labels, classes


def load_image_folder(
    dir: str | os.PathLike,
    size: int = 32,
    test_fraction: float = 0.2,
    seed: int = 0,
    grayscale: bool = False,
) -> tuple[Dataset, Dataset]:
    """A folder of class folders of images (png, jpg, jpeg, bmp, gif, webp; any case).

    Layouts:
      - `dir/<class>/...`: every class folder (searched recursively) is one class; the
        images are split stratified by class, deterministically for `seed`, with about
        `test_fraction` of each class in test.
      - `dir/train/<class>/...` with `dir/test/<class>/...` (or `dir/val/...`): those
        folders are the split (`test_fraction` and `seed` are unused); the classes are
        the train class folders. A `dir/train/` alone is split as above.
    Classes are sorted by folder name; hidden files and folders and other file types are
    skipped. Each image is converted to RGB (or L when `grayscale`), centre-cropped to a
    square and resized to `size` x `size`, scaled to [0, 1], then standardized per channel
    with the train split's mean and std.

    Returns:
        (train, test): `x` float32 (N, C, size, size) with C = 3, or 1 when `grayscale`;
        `y` int64 (N,).

    Raises:
        DataError: missing folder, fewer than 2 classes, an empty class folder, or a file
            that Pillow cannot read (the message names it).
    """
    size = _check_size(size)
    root = _require_dir(dir, "image")
    mode = "L" if grayscale else "RGB"
    subdirs = {d.name.lower(): d for d in _class_dirs(root)}
    train_root = subdirs.get("train")
    test_root = subdirs.get("test") or subdirs.get("val")

    if train_root is not None and test_root is not None:
        train_files, train_labels, classes = _labelled_files(train_root, None)
        test_files, test_labels, _ = _labelled_files(test_root, classes)
        x_train = _load_images(train_files, size, mode)
        x_test = _load_images(test_files, size, mode)
        y_train = np.asarray(train_labels, dtype=np.int64)
        y_test = np.asarray(test_labels, dtype=np.int64)
    else:
        test_fraction = _check_fraction(test_fraction)
        files, labels, classes = _labelled_files(train_root or root, None)
        all_labels = np.asarray(labels, dtype=np.int64)
        train_idx, test_idx = _stratified_split(all_labels, test_fraction, seed)
        if test_idx.size == 0:
            raise DataError(
                f"{train_root or root}: {len(files)} images are too few to hold out a test "
                "split (each class needs at least 2)"
            )
        pixels = _load_images(files, size, mode)
        x_train, y_train = pixels[train_idx], all_labels[train_idx]
        x_test, y_test = pixels[test_idx], all_labels[test_idx]
    return _standardize_pair(x_train, y_train, x_test, y_test, classes)


def load_sprite_folder(dir: str | os.PathLike, size: int = 32) -> np.ndarray:
    """Every image under `dir` (recursively, sorted by path) as diffusion training data.

    Images are read as in `load_image_folder` (RGB, transparency onto black, centre
    crop, resize to `size` x `size`) and mapped to [-1, 1].

    Returns:
        float32 (N, 3, size, size) in [-1, 1].
    """
    size = _check_size(size)
    root = _require_dir(dir, "sprite")
    files = _image_files(root)
    if not files:
        raise DataError(
            f"{root}: no images found ({', '.join(ext[1:] for ext in IMAGE_EXTENSIONS)})"
        )
    pixels = _load_images(files, size, "RGB")
    return pixels * 2.0 - 1.0


# --------------------------------------------------------------------------- sprites


def _hsv(hue: float, saturation: float, value: float) -> np.ndarray:
    """RGB in [0, 1], shape (3,), from HSV in [0, 1] (hue wraps)."""
    return np.array(
        colorsys.hsv_to_rgb(hue % 1.0, min(max(saturation, 0.0), 1.0), min(max(value, 0.0), 1.0)),
        dtype=np.float32,
    )


def _grow(mask: np.ndarray) -> np.ndarray:
    """4-neighbourhood dilation of a boolean (H, W) mask."""
    grown = mask.copy()
    grown[1:] |= mask[:-1]
    grown[:-1] |= mask[1:]
    grown[:, 1:] |= mask[:, :-1]
    grown[:, :-1] |= mask[:, 1:]
    return grown


def _component(mask: np.ndarray, row: int, col: int) -> np.ndarray:
    """The 4-connected part of boolean `mask` (H, W) that contains (row, col)."""
    reached = np.zeros_like(mask)
    reached[row, col] = True
    while True:
        grown = _grow(reached) & mask
        if np.array_equal(grown, reached):
            return reached
        reached = grown


def _invader_half(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Left half of an 8x8 space-invader-like sprite.

    Returns (body, accent): boolean (8, 4) masks; column 3 is next to the mirror line,
    row/column 0 and row 7 stay empty for the outline.
    """
    body = np.zeros((8, 4), dtype=bool)
    body[1:7, 1:4] = rng.random((6, 3)) < rng.uniform(0.45, 0.65)
    body[2:5, 3] = True  # a solid spine keeps the two halves joined
    accent = np.zeros_like(body)
    return body, accent


def _creature_half(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Left half of a 16x16 blob creature with optional legs, arms and horns.

    Returns (body, accent): boolean (16, 8) masks; column 7 is next to the mirror line,
    the outer ring of the full 16x16 grid stays empty for the outline.
    """
    rows, cols = np.mgrid[0:16, 0:8].astype(np.float32)
    centre_row = rng.uniform(6.0, 9.0)
    spread_row, spread_col = rng.uniform(3.0, 5.5), rng.uniform(2.5, 5.0)
    bump = np.exp(-(((rows - centre_row) / spread_row) ** 2) - (((cols - 7.0) / spread_col) ** 2))
    body = rng.random((16, 8)) < bump * rng.uniform(1.1, 1.6)
    body[0] = body[15] = False
    body[:, 0] = False
    seed_row = int(round(centre_row))
    body[seed_row, 7] = True
    body = _component(body, seed_row, 7)

    filled_rows = np.flatnonzero(body.any(axis=1))
    top, bottom = int(filled_rows[0]), int(filled_rows[-1])
    if rng.random() < 0.7 and bottom < 14:  # legs
        leg_col = int(rng.integers(3, 7))
        leg_len = int(rng.integers(1, 15 - bottom))
        body[bottom + 1:bottom + 1 + leg_len, leg_col] = True
        body[bottom, leg_col:8] = True  # hip joining the leg to the body
    if rng.random() < 0.5:  # arms
        arm_row = int(rng.integers(top, bottom + 1))
        inner = np.flatnonzero(body[arm_row])
        reach = int(rng.integers(1, 4))
        start = max(1, int(inner[0]) - reach) if inner.size else 4
        body[arm_row, start:8] = True
    if rng.random() < 0.5 and top > 1:  # horns or antennae
        horn_col = int(rng.integers(3, 7))
        horn_len = int(rng.integers(1, top))
        body[top - horn_len:top, horn_col] = True
        body[top, horn_col:8] = True

    accent = np.zeros_like(body)
    if rng.random() < 0.6:  # a belly patch or stripe in a second colour
        band_top = int(rng.integers(top, bottom + 1))
        band_len = int(rng.integers(1, 4))
        band_col = int(rng.integers(4, 8))
        accent[band_top:band_top + band_len, band_col:8] = True
        accent &= body
    return body, accent


def _humanoid_half(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Left half of a 16x16 character: head, torso, arms and legs.

    Returns (body, accent): boolean (16, 8) masks; the accent marks the clothes.
    """
    body = np.zeros((16, 8), dtype=bool)
    accent = np.zeros_like(body)
    head_top = int(rng.integers(1, 3))
    head_rows = int(rng.integers(3, 6))
    head_half = int(rng.integers(2, 4))
    body[head_top:head_top + head_rows, 8 - head_half:8] = True
    body[head_top, 8 - head_half] = rng.random() < 0.5  # rounded or square head corner
    if rng.random() < 0.5:  # hat or hair
        hat_top = max(1, head_top - 1)
        accent[hat_top, 8 - head_half:8] = True
        body[hat_top, 8 - head_half:8] = True

    torso_top = head_top + head_rows
    torso_rows = int(rng.integers(3, 6))
    torso_half = int(rng.integers(2, 5))
    torso = np.zeros_like(body)
    torso[torso_top:torso_top + torso_rows, 8 - torso_half:8] = True
    arm_len = int(rng.integers(torso_rows - 1, torso_rows + 2))
    arm_col = max(1, 8 - torso_half - 1)
    torso[torso_top:min(15, torso_top + arm_len), arm_col] = True

    legs_top = torso_top + torso_rows
    leg_col = int(rng.integers(max(1, 8 - torso_half), 7))
    leg_width = int(rng.integers(1, 3))
    legs = np.zeros_like(body)
    legs[legs_top:15, leg_col:min(8, leg_col + leg_width)] = True
    if rng.random() < 0.5:  # a skirt or robe instead of separate legs
        legs[legs_top:min(15, legs_top + 2), leg_col:8] = True

    body |= torso | legs
    accent |= torso
    # a few random bumps on the silhouette, so characters are not all rectangles
    bumps = _grow(body) & ~body & (rng.random(body.shape) < 0.12)
    bumps[0] = bumps[15] = False
    bumps[:, 0] = False
    body |= bumps
    return body, accent


def _draw_sprite(rng: np.random.Generator, size: int) -> np.ndarray:
    """One symmetric pixel-art sprite, float32 (3, size, size) in [0, 1]."""
    kind = rng.choice(3, p=[0.25, 0.4, 0.35])
    if kind == 0:
        half_body, half_accent = _invader_half(rng)
    elif kind == 1:
        half_body, half_accent = _creature_half(rng)
    else:
        half_body, half_accent = _humanoid_half(rng)
    body = np.concatenate([half_body, half_body[:, ::-1]], axis=1)
    accent = np.concatenate([half_accent, half_accent[:, ::-1]], axis=1) & body
    grid = body.shape[0]

    hue = rng.random()
    main = _hsv(hue, rng.uniform(0.45, 0.95), rng.uniform(0.6, 1.0))
    second = _hsv(hue + rng.uniform(0.25, 0.75), rng.uniform(0.4, 0.9), rng.uniform(0.45, 0.95))
    outline = _hsv(hue, rng.uniform(0.3, 0.8), rng.uniform(0.05, 0.22))
    if rng.random() < 0.5:
        background = _hsv(rng.random(), rng.uniform(0.0, 0.35), rng.uniform(0.1, 0.25))
    else:
        background = _hsv(rng.random(), rng.uniform(0.0, 0.25), rng.uniform(0.82, 0.96))

    rgb = np.empty((grid, grid, 3), dtype=np.float32)
    rgb[:] = background
    rgb[_grow(body) & ~body] = outline
    rgb[body] = main
    rgb[accent] = second
    # light from above: a highlight on top edges, a shadow on bottom edges
    above_empty = body.copy()
    above_empty[1:] &= ~body[:-1]
    below_empty = body.copy()
    below_empty[:-1] &= ~body[1:]
    rgb[above_empty] = np.minimum(rgb[above_empty] * 1.25 + 0.1, 1.0)
    rgb[below_empty] *= 0.65

    if grid == 16:  # eyes: a mirrored pair of body cells with body all around
        inner = body & ~_grow(~body)
        inner[:, 8:] = False
        inner[:, 7] = False  # not on the mirror line, so there are two eyes
        candidates = np.argwhere(inner[: grid // 2 + 1])
        if candidates.size:
            row, col = candidates[rng.integers(len(candidates))]
            eye = np.float32(0.05) if main.mean() > 0.55 else np.float32(0.97)
            rgb[row, col] = eye
            rgb[row, grid - 1 - col] = eye

    # nearest-neighbour upscale of the (grid, grid) cells to (size, size) pixels
    cell_of_pixel = (np.arange(size) * grid) // size
    return rgb[cell_of_pixel][:, cell_of_pixel].transpose(2, 0, 1)


def make_sprites(n: int, size: int = 32, seed: int = 0) -> np.ndarray:
    """Procedurally drawn pixel-art sprites, the embedded default for `train diffusion`.

    Each sprite is one of three templates (an 8x8 space invader, a 16x16 blob creature
    with legs/arms/horns, a 16x16 character with head, clothes, arms and legs) whose left
    half is random and mirrored onto the right, coloured from a palette of a main colour,
    a second colour, a dark outline, highlight/shadow shades and eyes, on a plain light or
    dark background, then upscaled nearest-neighbour to `size` x `size`. With `size` a
    multiple of the grid (16, 32, 64, ...) every sprite is exactly left-right symmetric.

    Sprite i depends only on (seed, i), so `make_sprites(m, size, seed)` is the first m
    sprites of `make_sprites(n, size, seed)` for m <= n.

    Returns:
        float32 (n, 3, size, size) in [-1, 1].
    """
    if int(n) != n or n < 0:
        raise ValueError(f"make_sprites: n must be a non-negative integer, got {n}")
    size = _check_size(size)
    if seed < 0:
        raise ValueError(f"make_sprites: seed must be non-negative, got {seed}")
    out = np.empty((int(n), 3, size, size), dtype=np.float32)
    for i in range(int(n)):
        out[i] = _draw_sprite(np.random.default_rng([int(seed), i]), size)
    np.multiply(out, 2.0, out=out)
    np.subtract(out, 1.0, out=out)
    return out


# --------------------------------------------------------------------------- batching


def batches(
    data: Dataset | np.ndarray | tuple[np.ndarray, np.ndarray | None],
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    """Iterate over one epoch in mini-batches.

    Args:
        data: a `Dataset`, an (x, y) pair with y possibly None, or a bare array x.
            x has shape (N, ...), y shape (N,).
        batch_size: samples per batch; the last batch holds the remaining
            N mod batch_size samples when that is not zero (it is never dropped).
        shuffle: visit samples in a random order; otherwise in index order.
        seed, epoch: non-negative integers; the order is a fixed function of
            (seed, epoch) only, so a run resumed at epoch e sees the same batches as an
            uninterrupted one.

    Yields:
        (x_batch, y_batch): x_batch of shape (B, ...), y_batch of shape (B,) or None.
    """
    if isinstance(data, Dataset):
        x, y = data.x, data.y
    elif isinstance(data, (tuple, list)):
        if len(data) != 2:
            raise ValueError(f"batches: expected an (x, y) pair, got {len(data)} items")
        x, y = data
    else:
        x, y = data, None
    x = np.asarray(x)
    if y is not None:
        y = np.asarray(y)
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"batches: y has {y.shape[0]} samples, x has {x.shape[0]}")
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batches: batch_size must be a positive integer, got {batch_size}")
    if seed < 0 or epoch < 0:
        raise ValueError(f"batches: seed and epoch must be non-negative, got {seed}, {epoch}")
    batch_size = int(batch_size)
    n = x.shape[0]
    if shuffle:
        order = np.random.default_rng([int(seed), int(epoch)]).permutation(n)
    else:
        order = np.arange(n)
    return _iterate(x, y, order, batch_size)


def _iterate(
    x: np.ndarray, y: np.ndarray | None, order: np.ndarray, batch_size: int
) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
    for start in range(0, order.size, batch_size):
        idx = order[start:start + batch_size]
        yield x[idx], (None if y is None else y[idx])


# --------------------------------------------------------------------------- image grids


def save_image_grid(
    images: np.ndarray,
    path: str | os.PathLike,
    nrow: int | None = None,
    value_range: tuple[float, float] = (-1.0, 1.0),
    padding: int = 2,
    pad_value: float = 0.0,
) -> Path:
    """Tile images into one PNG, written atomically (temp file, then `os.replace`).

    Args:
        images: (N, C, H, W) with C = 1 (grayscale) or 3 (RGB).
        path: the PNG to write; its folder is created if missing.
        nrow: images per row (as in torchvision); default ceil(sqrt(N)).
        value_range: (low, high) that maps to black and white; (-1, 1) for DDPM samples,
            (0, 1) for pixels. Values outside are clipped; NaN shows as `low`.
        padding: pixels between tiles and around the border.
        pad_value: colour of the padding, in [0, 1] (0 black).

    The PNG is (rows * (H + padding) + padding) pixels high and
    (nrow * (W + padding) + padding) wide, rows = ceil(N / nrow).

    Returns:
        the path written.
    """
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4 or images.shape[1] not in (1, 3):
        raise ValueError(
            f"save_image_grid: images have shape {images.shape}, expected (N, C, H, W) "
            "with C = 1 or 3"
        )
    count, channels, height, width = images.shape
    if count == 0:
        raise ValueError("save_image_grid: no images to save")
    low, high = float(value_range[0]), float(value_range[1])
    if not high > low:
        raise ValueError(f"save_image_grid: value_range {value_range} needs low < high")
    columns = int(nrow) if nrow is not None else math.ceil(math.sqrt(count))
    if columns < 1:
        raise ValueError(f"save_image_grid: nrow must be positive, got {nrow}")
    columns = min(columns, count)
    rows = math.ceil(count / columns)

    unit = np.nan_to_num((images - low) / (high - low), nan=0.0, posinf=1.0, neginf=0.0)
    pixels = np.rint(np.clip(unit, 0.0, 1.0) * 255.0).astype(np.uint8)
    grid = np.full(
        (rows * (height + padding) + padding, columns * (width + padding) + padding, channels),
        np.uint8(round(min(max(pad_value, 0.0), 1.0) * 255)),
        dtype=np.uint8,
    )
    for i in range(count):
        top = padding + (i // columns) * (height + padding)
        left = padding + (i % columns) * (width + padding)
        grid[top:top + height, left:left + width] = pixels[i].transpose(1, 2, 0)
    picture = Image.fromarray(grid[:, :, 0] if channels == 1 else grid)  # mode L or RGB

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # nanosign's writer: fsynced, and its temporary file (left by a crash) is recognised
    # and removed by the next write.
    with nanosign.atomic_writer(target) as stream:
        picture.save(stream, format="PNG")
    return target
