"""The image classifiers of ``anygpu train``: digits, mnist and classifier.

Each is a small CNN trained with Adam and cross-entropy, the learning rate halved every
four epochs (StepLR), evaluated by accuracy on the test split. The schedule depends on
the epoch alone, not on ``--epochs``, so a run extended with ``--resume --epochs N`` is
the same run as one started with ``--epochs N``. Written with ``anygpu.nn`` / ``anygpu.optim`` exactly as one
would with ``torch.nn`` / ``torch.optim``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

import anygpu as ag
from anygpu import nn, optim
from anygpu.io.datasets import DataError, Dataset, batches, load_digits, load_image_folder, load_mnist
from anygpu.nn import functional as F
from anygpu.train import modelfile
from anygpu.train.loop import Settings

__all__ = ["ClassifierTask", "evaluate_classifier", "digits_cnn", "lenet", "small_cnn", "build_digits", "build_mnist", "build_classifier"]

EVAL_BATCH = 500
LR_HALVING_EPOCHS = 4
SPLIT_SEED = 0  # the test split stays the same whatever --seed is, so runs compare


def digits_cnn(classes: int = 10) -> nn.Module:
    """For (N, 1, 8, 8) digits: two 3x3 convolutions, one 2x2 max-pool, two linear layers."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.ReLU(),
        nn.Linear(64, classes),
    )


def lenet(height: int, width: int, classes: int = 10) -> nn.Module:
    """LeNet-5 for (N, 1, H, W) images (28x28 for MNIST): conv5-pool-conv5-pool, 120-84-classes."""
    side_h, side_w = (height // 2 - 4) // 2, (width // 2 - 4) // 2
    if side_h < 1 or side_w < 1:
        raise DataError(f"mnist: images are {height}x{width}; LeNet needs at least 12x12")
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * side_h * side_w, 120), nn.ReLU(),
        nn.Linear(120, 84), nn.ReLU(),
        nn.Linear(84, classes),
    )


def small_cnn(channels: int, size: int, classes: int) -> nn.Module:
    """For (N, C, size, size) photos: three conv-GroupNorm-ReLU-maxpool stages, two linear layers.

    GroupNorm rather than BatchNorm: it does not depend on the batch, so small and uneven
    last batches train the same, and evaluation needs no running statistics."""
    widths = (32, 64, 64)
    layers: list[nn.Module] = []
    previous, side = channels, size
    for width in widths:
        layers += [nn.Conv2d(previous, width, 3, padding=1), nn.GroupNorm(8, width), nn.ReLU(), nn.MaxPool2d(2)]
        previous, side = width, side // 2
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(previous * side * side, 128), nn.ReLU(),
                         nn.Linear(128, classes))


def _first(data: Dataset, limit: int | None) -> Dataset:
    if limit is None or limit >= len(data):
        return data
    return Dataset(data.x[:limit], data.y[:limit], data.classes, data.mean, data.std)


def evaluate_classifier(model: nn.Module, data: Dataset) -> dict[str, float]:
    """Accuracy and mean cross-entropy of `model` on a non-empty labelled set, in batches of
    EVAL_BATCH: what training reports as test_accuracy / test_loss and `anygpu eval` prints."""
    correct, loss_sum = 0, 0.0
    for x, y in batches(data, EVAL_BATCH, shuffle=False):
        logits = model(ag.tensor(x))
        loss_sum += float(F.cross_entropy(logits, ag.tensor(y)).item()) * len(x)
        correct += int((logits.argmax(dim=1).numpy() == y).sum())
    count = len(data)
    return {"test_accuracy": correct / count, "test_loss": loss_sum / count}


class ClassifierTask:
    """Cross-entropy training of `model` on labelled images, accuracy on the test split."""

    scheduler_per_step = False
    has_test = True
    extra_files: list[str] = []

    def __init__(self, model: nn.Module, train: Dataset, test: Dataset, settings: Settings,
                 architecture: dict[str, Any] | None = None):
        if len(train) == 0:
            raise DataError(f"train {settings.stratagem}: the train split is empty")
        self.model = model
        self.architecture = architecture  # {"name": builder, **its arguments}: see train/modelfile.py
        self.train_data = train
        self.test_data = test
        self.optimizer = optim.Adam(model.parameters(), lr=settings.lr)
        self.scheduler = optim.StepLR(self.optimizer, step_size=LR_HALVING_EPOCHS, gamma=0.5)

    def describe(self) -> str:
        shape = "x".join(str(side) for side in self.train_data.x.shape[1:])
        return (f"{len(self.train_data)} train / {len(self.test_data)} test images of {shape}, "
                f"{len(self.train_data.classes)} classes")

    def loss(self, x: np.ndarray, y: np.ndarray | None, rng: np.random.Generator) -> ag.Tensor:
        return self.loss_of(*self.inputs(x, y, rng))

    def inputs(self, x: np.ndarray, y: np.ndarray | None, rng: np.random.Generator) -> tuple:
        """The batch as Tensors (the host part of a step; the loop compiles the rest)."""
        return ag.tensor(x), ag.tensor(y)

    def loss_of(self, images: ag.Tensor, labels: ag.Tensor) -> ag.Tensor:
        return F.cross_entropy(self.model(images), labels)

    def evaluate(self) -> dict[str, float]:
        if len(self.test_data) == 0:
            return {}
        return evaluate_classifier(self.model, self.test_data)

    def end_epoch(self, out: Path, epoch: int, last: bool) -> dict[str, Any]:
        return {}

    def model_metadata(self) -> dict[str, str]:
        data = self.train_data
        return modelfile.classifier_metadata(self.architecture, data.x.shape[1:], data.classes, data.mean, data.std)

    def result(self, record: Mapping[str, Any]) -> str:
        if "test_accuracy" in record:
            return f"test accuracy {record['test_accuracy']:.3f}"
        return f"train loss {record['train_loss']:.4f}"


def build_digits(settings: Settings) -> ClassifierTask:
    train, test = load_digits(seed=SPLIT_SEED)
    train, test = _first(train, settings.limit), _first(test, settings.limit)
    architecture = {"name": "digits_cnn", "classes": len(train.classes)}
    return ClassifierTask(digits_cnn(len(train.classes)), train, test, settings, architecture)


def build_mnist(settings: Settings) -> ClassifierTask:
    train, test = load_mnist(settings.data)
    train, test = _first(train, settings.limit), _first(test, settings.limit)
    height, width = train.x.shape[2:]
    architecture = {"name": "lenet", "height": int(height), "width": int(width), "classes": len(train.classes)}
    return ClassifierTask(lenet(height, width, len(train.classes)), train, test, settings, architecture)


def build_classifier(settings: Settings) -> ClassifierTask:
    size = int(settings.extra.get("size", 32))
    train, test = load_image_folder(settings.data, size=size, seed=SPLIT_SEED)
    train, test = _first(train, settings.limit), _first(test, settings.limit)
    architecture = {"name": "small_cnn", "channels": int(train.x.shape[1]), "size": size,
                    "classes": len(train.classes)}
    return ClassifierTask(small_cnn(train.x.shape[1], size, len(train.classes)), train, test, settings,
                          architecture)
