"""``anygpu eval``: accuracy and loss of a classifier model on a data set.

The data set is read by the loader ``anygpu train`` uses for it and split the same way,
so ``--split test`` on the training data gives the run's ``test_accuracy`` and
``test_loss``. Inputs are standardized with the model's own constants (its training
set's), not the evaluation set's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from anygpu.io.datasets import DataError, Dataset, load_digits, load_image_folder, load_mnist
from anygpu.train import modelfile

__all__ = ["load_eval_data", "evaluate", "run"]


def _is_idx_folder(folder: Path) -> bool:
    return any(folder.glob("t10k-images*")) or any(folder.glob("train-images*"))


def _restandardize(data: Dataset, model: modelfile.ModelFile) -> Dataset:
    """`data` standardized with the model's mean/std instead of its own train split's."""
    mean = np.asarray(model.preprocess["mean"], dtype=np.float32)
    std = np.asarray(model.preprocess["std"], dtype=np.float32)
    if np.array_equal(mean, data.mean) and np.array_equal(std, data.std):
        return data  # the model's own training data: exactly what training evaluated
    pixels = data.x * data.std[None, :, None, None] + data.mean[None, :, None, None]
    return Dataset((pixels - mean[None, :, None, None]) / std[None, :, None, None], data.y, data.classes, mean, std)


def _relabel(data: Dataset, model: modelfile.ModelFile, where: str) -> Dataset:
    """Labels of `data` mapped onto the model's class order, by class name."""
    index = {name: k for k, name in enumerate(model.classes)}
    unknown = [name for name in data.classes if name not in index]
    if unknown:
        raise DataError(f"{where}: class {unknown[0]!r} is not one of the model's classes "
                        f"({', '.join(model.classes)})")
    mapping = np.asarray([index[name] for name in data.classes], dtype=np.int64)
    return Dataset(data.x, mapping[data.y], list(model.classes), data.mean, data.std)


def load_eval_data(model: modelfile.ModelFile, data: Path | None, split: str) -> Dataset:
    """The labelled images to evaluate `model` on, ready for it (shape, standardization, labels)."""
    from anygpu.train.stratagems import SPLIT_SEED  # how anygpu train splits, whatever its --seed

    channels, height, width = model.input_shape
    if data is None:
        if model.stratagem != "digits":
            raise ValueError(f"eval: a {model.stratagem} model needs --data DIR")
        train, test = load_digits(seed=SPLIT_SEED)
        where = "scikit-learn digits"
    elif not data.is_dir():
        raise DataError(f"{data}: --data must be a folder (IDX files or class folders of images)")
    elif _is_idx_folder(data):
        train, test = load_mnist(data)
        where = str(data)
    else:
        if height != width:
            raise ValueError(f"eval: the model's inputs are {height}x{width}; image folders give square images")
        train, test = load_image_folder(data, size=height, seed=SPLIT_SEED, grayscale=channels == 1)
        where = str(data)
    if train.x.shape[1:] != tuple(model.input_shape):
        raise DataError(f"{where}: images are {'x'.join(map(str, train.x.shape[1:]))}, the model takes "
                        f"{'x'.join(map(str, model.input_shape))}")
    if split == "all":
        chosen = Dataset(np.concatenate([train.x, test.x]), np.concatenate([train.y, test.y]),
                         train.classes, train.mean, train.std)
    else:
        chosen = test
    if len(chosen) == 0:
        raise DataError(f"{where}: the {split} split holds no images")
    return _restandardize(_relabel(chosen, model, where), model)


def evaluate(model: modelfile.ModelFile, data: Dataset) -> dict[str, float]:
    """{"accuracy", "loss"} of `model` on `data`, computed as training's evaluation computes them."""
    import anygpu as ag
    from anygpu.train.stratagems import evaluate_classifier

    with ag.no_grad():
        numbers = evaluate_classifier(model.build(), data)
    return {"accuracy": numbers["test_accuracy"], "loss": numbers["test_loss"]}


def run(args: argparse.Namespace) -> int:
    """The ``anygpu eval`` command."""
    import anygpu as ag

    model = modelfile.read(args.model)
    if not model.is_classifier:
        raise ValueError(f"eval: {args.model} is a {model.stratagem} model; eval needs a digits, mnist or "
                         "classifier model")
    data = load_eval_data(model, args.data, args.split)
    numbers = evaluate(model, data)
    dev = ag.gpu()
    adapter = f"{dev.adapter_name} ({dev.backend})"
    source = str(args.data) if args.data is not None else "scikit-learn digits"
    if args.json:
        print(json.dumps({"model": str(args.model), "data": source, "split": args.split, "images": len(data),
                          **numbers, "adapter": adapter}, indent=2))
    else:
        print(f"accuracy {numbers['accuracy']:.4f}, loss {numbers['loss']:.4f} on {len(data)} images "
              f"({args.split} split of {source}) on {adapter}")
    return 0
