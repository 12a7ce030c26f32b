"""``anygpu predict``: classify image files with a self-describing classifier model."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from anygpu.io.datasets import DataError, image_files, read_images
from anygpu.train import modelfile

__all__ = ["Prediction", "predict", "collect_images", "preprocess", "run"]


@dataclass
class Prediction:
    """The top classes of one image, most probable first: (label, probability) pairs."""

    path: str
    top_k: list[tuple[str, float]]

    def to_json(self) -> dict:
        label, probability = self.top_k[0]
        return {"path": self.path, "label": label, "probability": probability,
                "top_k": [{"label": name, "probability": p} for name, p in self.top_k]}


def collect_images(inputs: Sequence[Path]) -> list[Path]:
    """Files as given, folders expanded to the image files under them (recursively, sorted)."""
    files: list[Path] = []
    for item in inputs:
        if item.is_dir():
            found = image_files(item)
            if not found:
                raise DataError(f"{item}: folder holds no image files (png, jpg, jpeg, bmp, gif, webp)")
            files += found
        elif item.is_file():
            files.append(item)
        elif item.exists():
            raise DataError(f"{item}: is neither a file nor a folder")
        else:
            raise DataError(f"{item}: no such file or folder")
    return files


def preprocess(model: modelfile.ModelFile, files: Sequence[Path]) -> np.ndarray:
    """Image files -> float32 (N, C, H, W) as the model's training data was made: converted
    to its colour mode, centre-cropped, resized, scaled to [0, 1], standardized per channel."""
    channels, height, width = model.input_shape
    if height != width:
        raise ValueError(f"predict: the model's inputs are {height}x{width}; only square inputs can be read "
                         "from image files")
    pixels = read_images(files, height, model.preprocess["color"])
    mean = np.asarray(model.preprocess["mean"], dtype=np.float32)[None, :, None, None]
    std = np.asarray(model.preprocess["std"], dtype=np.float32)[None, :, None, None]
    return (pixels - mean) / std


def predict(model: modelfile.ModelFile, files: Sequence[Path], top_k: int = 1,
            batch_size: int = 64) -> list[Prediction]:
    """Classify `files`; each Prediction holds min(top_k, classes) (label, probability) pairs.

    Every file is decoded before any GPU work, so a bad one fails the whole call early."""
    import anygpu as ag
    from anygpu.nn import functional as F

    x = preprocess(model, files)
    network = model.build()
    k = min(top_k, len(model.classes))
    results: list[Prediction] = []
    with ag.no_grad():
        for start in range(0, len(x), batch_size):
            probabilities = F.softmax(network(ag.tensor(x[start:start + batch_size])), dim=1).numpy()
            for offset, row in enumerate(probabilities):
                order = np.argsort(-row, kind="stable")[:k]
                results.append(Prediction(str(files[start + offset]),
                                          [(model.classes[i], float(row[i])) for i in order]))
    return results


def run(args: argparse.Namespace) -> int:
    """The ``anygpu predict`` command."""
    model = modelfile.read(args.model)
    if not model.is_classifier:
        raise ValueError(f"predict: {args.model} is a {model.stratagem} model; predict needs a digits, mnist or "
                         f"classifier model (draw with 'anygpu sample {args.model}')")
    results = predict(model, collect_images(args.inputs), args.top_k, args.batch_size)
    if args.json:
        print(json.dumps([result.to_json() for result in results], indent=2))
    else:
        for result in results:
            pairs = "\t".join(f"{label}\t{probability:.4f}" for label, probability in result.top_k)
            print(f"{result.path}\t{pairs}")
    return 0
