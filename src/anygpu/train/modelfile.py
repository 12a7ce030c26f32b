"""Self-describing model files: what ``model.safetensors`` says about itself, and reading it back.

Every stratagem writes, in the safetensors header metadata (str -> str; JSON strings,
never pickle), everything needed to rebuild and use the model without the training
command:

- ``format``: ``anygpu-model-1``
- ``stratagem``: digits, mnist, classifier or diffusion (written by the loop, with ``epoch``)
- ``architecture``: ``{"name": ..., <hyper-parameters>}``, one of ``ARCHITECTURES``
- ``input_shape``: ``[C, H, W]`` of one input image
- ``preprocess``: how image files become inputs: ``{"color": "L"|"RGB", "resize":
  "center-crop", "range": [lo, hi]}`` (pixels scaled from [0, 255] to [lo, hi]), and for
  classifiers ``"mean"``/``"std"`` (per channel; x = (pixel in [0, 1] - mean) / std)
- ``classes``: the class names, label k is ``classes[k]`` (classifiers)
- ``diffusion``: the noise schedule ``{"timesteps": T, "betas": "linear", "beta_start",
  "beta_end", "prediction": "epsilon", "time_features": "sinusoidal"}`` (diffusion)

``read(path)`` verifies the NanoSign signature (``TamperedError`` on a mismatch), then
checks every entry it reads: a file without the entries (written before they existed),
or with a damaged one, raises ``ModelFileError`` (a ``ValueError``) naming the entry.
``ModelFile.build()`` rebuilds the network and loads its weights.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from anygpu import bounded_json
from anygpu.io import checkpoint, nanosign

__all__ = ["MODEL_FORMAT", "ARCHITECTURES", "ModelFile", "ModelFileError", "read", "classifier_metadata",
           "diffusion_metadata"]

MODEL_FORMAT = "anygpu-model-1"
CLASSIFIER_STRATAGEMS = ("digits", "mnist", "classifier")
STRATAGEMS = (*CLASSIFIER_STRATAGEMS, "diffusion")
# Bounds that no model anygpu trains comes near; a file asking for more is damaged or hostile,
# and would otherwise make us allocate without limit before the weights fail to fit.
_MAX_SIDE = 4096
_MAX_CLASSES = 100_000
_MAX_WIDTH = 4096
_MAX_TIMESTEPS = 100_000


class ModelFileError(ValueError):
    """A model file that is not a self-describing anygpu model, or has a damaged entry."""


def _positive(limit: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit


# name -> (builder "module:function", {hyper-parameter: check}); the builder is called with them.
ARCHITECTURES: dict[str, tuple[str, dict[str, Callable[[Any], bool]]]] = {
    "digits_cnn": ("anygpu.train.stratagems:digits_cnn", {"classes": _positive(_MAX_CLASSES)}),
    "lenet": ("anygpu.train.stratagems:lenet", {"height": _positive(_MAX_SIDE), "width": _positive(_MAX_SIDE),
                                                "classes": _positive(_MAX_CLASSES)}),
    "small_cnn": ("anygpu.train.stratagems:small_cnn", {"channels": _positive(4), "size": _positive(_MAX_SIDE),
                                                        "classes": _positive(_MAX_CLASSES)}),
    "tiny_unet": ("anygpu.train.diffusion:TinyUNet", {"channels": _positive(4), "width": _positive(_MAX_WIDTH),
                                                      "time_dim": _positive(4 * _MAX_WIDTH)}),
}


# --------------------------------------------------------------------------- writing


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def classifier_metadata(architecture: Mapping[str, Any], input_shape, classes, mean, std) -> dict[str, str]:
    """Header entries for a classifier whose inputs were [0, 1] pixels standardized by mean/std (C,)."""
    channels = int(input_shape[0])
    return {
        "format": MODEL_FORMAT,
        "architecture": _dumps(dict(architecture)),
        "input_shape": _dumps([int(side) for side in input_shape]),
        "preprocess": _dumps({
            "color": "L" if channels == 1 else "RGB", "resize": "center-crop", "range": [0.0, 1.0],
            "mean": [float(v) for v in (mean if mean is not None else np.zeros(channels))],
            "std": [float(v) for v in (std if std is not None else np.ones(channels))],
        }),
        "classes": _dumps([str(name) for name in classes]),
    }


def diffusion_metadata(architecture: Mapping[str, Any], input_shape, betas: np.ndarray) -> dict[str, str]:
    """Header entries for an epsilon-predicting DDPM on images in [-1, 1] with a linear schedule."""
    return {
        "format": MODEL_FORMAT,
        "architecture": _dumps(dict(architecture)),
        "input_shape": _dumps([int(side) for side in input_shape]),
        "preprocess": _dumps({"color": "RGB" if int(input_shape[0]) == 3 else "L", "resize": "center-crop",
                              "range": [-1.0, 1.0]}),
        "diffusion": _dumps({
            "timesteps": int(len(betas)), "betas": "linear",
            "beta_start": float(betas[0]), "beta_end": float(betas[-1]),
            "prediction": "epsilon", "time_features": "sinusoidal",
        }),
    }


# --------------------------------------------------------------------------- reading


@dataclass
class ModelFile:
    """A verified, checked model file. ``weights`` maps parameter names to float32 arrays."""

    path: Path
    stratagem: str
    architecture: dict[str, Any]
    input_shape: tuple[int, int, int]
    preprocess: dict[str, Any]
    weights: dict[str, np.ndarray]
    classes: list[str] = field(default_factory=list)
    diffusion: dict[str, Any] = field(default_factory=dict)
    epoch: int | None = None

    @property
    def is_classifier(self) -> bool:
        return self.stratagem in CLASSIFIER_STRATAGEMS

    def betas(self) -> np.ndarray:
        """The diffusion schedule's betas, float64 (T,)."""
        schedule = self.diffusion
        return np.linspace(schedule["beta_start"], schedule["beta_end"], schedule["timesteps"], dtype=np.float64)

    def build(self):
        """The network (an ``anygpu.nn.Module`` in eval mode) with the file's weights."""
        import importlib

        target, _ = ARCHITECTURES[self.architecture["name"]]
        module, name = target.split(":")
        hyper = {key: value for key, value in self.architecture.items() if key != "name"}
        model = getattr(importlib.import_module(module), name)(**hyper)
        try:
            model.load_state_dict(self.weights)
        except (KeyError, RuntimeError, ValueError) as error:
            raise ModelFileError(f"{self.path}: the weights do not fit its architecture "
                                 f"{self.architecture} ({' '.join(str(error).split())})") from None
        model.eval()
        return model


def _entry(metadata: Mapping[str, str], key: str, path: Path, parse_json: bool = True) -> Any:
    if key not in metadata:
        raise ModelFileError(f"{path}: the model file has no '{key}' entry in its metadata")
    if not parse_json:
        return metadata[key]
    try:  # bounded: "[[[[..." nested past the limit is refused before json recurses
        return bounded_json.loads(metadata[key], f"{path}: the '{key}' entry")
    except ValueError as error:
        raise ModelFileError(str(error)) from None


def _bad(path: Path, key: str, value: Any, expected: str) -> ModelFileError:
    shown = json.dumps(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return ModelFileError(f"{path}: the '{key}' entry is {shown}; expected {expected}")


def _finite_list(value: Any, length: int) -> bool:
    return (isinstance(value, list) and len(value) == length
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value))


def read(path: str | Path) -> ModelFile:
    """Verify and read a model file written by ``anygpu train``; check every entry it uses.

    Raises FileNotFoundError, ``nanosign.TamperedError`` (signature mismatch) or
    ``ModelFileError`` (unsigned, not safetensors, no or damaged self-description).
    """
    path = Path(path)
    if path.is_dir():
        raise ModelFileError(f"{path}: is a folder; expected a model file such as runs/digits/model.safetensors")
    try:
        arrays, metadata = checkpoint.load_with_metadata(path)
    except nanosign.TamperedError:
        raise
    except ValueError as error:  # unsigned, or not safetensors
        raise ModelFileError(" ".join(str(error).split())) from None
    if metadata.get("format") != MODEL_FORMAT:
        if "format" not in metadata:
            raise ModelFileError(
                f"{path}: the model file does not describe itself (no 'format' entry; written by an older "
                f"anygpu or not by 'anygpu train'); train it again with this version")
        raise _bad(path, "format", metadata["format"], f'"{MODEL_FORMAT}"')

    stratagem = _entry(metadata, "stratagem", path, parse_json=False)
    if stratagem not in STRATAGEMS:
        raise _bad(path, "stratagem", stratagem, "one of " + ", ".join(STRATAGEMS))

    architecture = _entry(metadata, "architecture", path)
    if not isinstance(architecture, dict) or architecture.get("name") not in ARCHITECTURES:
        raise _bad(path, "architecture", architecture, "an object whose name is one of " + ", ".join(ARCHITECTURES))
    checks = ARCHITECTURES[architecture["name"]][1]
    if set(architecture) != {"name", *checks} or not all(check(architecture[key]) for key, check in checks.items()):
        raise _bad(path, "architecture", architecture,
                   f"{architecture['name']} with positive integer {', '.join(checks)} within bounds")
    if (architecture["name"] == "tiny_unet") != (stratagem == "diffusion"):
        raise _bad(path, "architecture", architecture, f"an architecture of a {stratagem} model")

    input_shape = _entry(metadata, "input_shape", path)
    if not (isinstance(input_shape, list) and len(input_shape) == 3
            and _positive(4)(input_shape[0]) and all(_positive(_MAX_SIDE)(side) for side in input_shape[1:])):
        raise _bad(path, "input_shape", input_shape, "[C, H, W] with C in 1..4 and H, W positive")
    channels = input_shape[0]
    if architecture.get("channels", channels) != channels:
        raise _bad(path, "architecture", architecture, f"{channels} channels as input_shape says")
    # the sizes each network's layers were built for (its first Linear depends on them)
    fixed = {"digits_cnn": [1, 8, 8], "lenet": [1, architecture.get("height"), architecture.get("width")],
             "small_cnn": [channels, architecture.get("size"), architecture.get("size")]}
    if architecture["name"] in fixed and input_shape != fixed[architecture["name"]]:
        raise _bad(path, "input_shape", input_shape, f"{fixed[architecture['name']]} for {architecture['name']}")

    preprocess = _entry(metadata, "preprocess", path)
    expected_range = [-1.0, 1.0] if stratagem == "diffusion" else [0.0, 1.0]
    if (not isinstance(preprocess, dict) or preprocess.get("color") not in ("L", "RGB")
            or (preprocess["color"] == "L") != (channels == 1) or preprocess.get("resize") != "center-crop"
            or preprocess.get("range") != expected_range):
        raise _bad(path, "preprocess", preprocess,
                   f'color "L" (1 channel) or "RGB" (3), resize "center-crop", range {expected_range}')

    model = ModelFile(path=path, stratagem=stratagem, architecture=architecture,
                      input_shape=tuple(input_shape), preprocess=preprocess, weights=arrays)
    epoch = metadata.get("epoch")
    model.epoch = int(epoch) if epoch is not None and epoch.isdigit() else None

    if model.is_classifier:
        if not (_finite_list(preprocess.get("mean"), channels) and _finite_list(preprocess.get("std"), channels)
                and all(v > 0 for v in preprocess["std"])):
            raise _bad(path, "preprocess", preprocess, f"finite mean and positive std lists of {channels} numbers")
        classes = _entry(metadata, "classes", path)
        if (not isinstance(classes, list) or len(classes) != architecture["classes"]
                or not all(isinstance(name, str) for name in classes)):
            raise _bad(path, "classes", classes, f"a list of {architecture['classes']} class names")
        model.classes = classes
    else:
        schedule = _entry(metadata, "diffusion", path)
        keys = {"timesteps", "betas", "beta_start", "beta_end", "prediction", "time_features"}
        if (not isinstance(schedule, dict) or set(schedule) != keys
                or not _positive(_MAX_TIMESTEPS)(schedule["timesteps"]) or schedule["betas"] != "linear"
                or schedule["prediction"] != "epsilon" or schedule["time_features"] != "sinusoidal"
                or not _finite_list([schedule["beta_start"], schedule["beta_end"]], 2)
                or not 0 < schedule["beta_start"] <= schedule["beta_end"] < 1):
            raise _bad(path, "diffusion", schedule,
                       'timesteps T, betas "linear" from 0 < beta_start <= beta_end < 1, '
                       'prediction "epsilon", time_features "sinusoidal"')
        if input_shape[1] % 4 or input_shape[2] % 4:
            raise _bad(path, "input_shape", input_shape, "H and W multiples of 4 for the UNet")
        model.diffusion = schedule
    return model
