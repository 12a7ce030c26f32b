"""Use what ``anygpu train`` wrote: ``anygpu predict``, ``anygpu eval`` and ``anygpu sample``.

The model files describe themselves (``anygpu.train.modelfile``), so no training option is
needed to use them. ``register(subparsers)`` adds the three commands. Exit codes: 0 done;
1 the model file fails its NanoSign check; 2 bad arguments, unreadable or non-image
input, or a model of the wrong kind (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Callable

from anygpu.io.nanosign import TamperedError
from anygpu.train import non_negative_int, positive_int

__all__ = ["register", "EXIT_TAMPERED", "STARTER_MODEL", "starter_model_path"]

EXIT_TAMPERED = 1
STARTER_MODEL = "starter_sprites.safetensors"  # in anygpu/models/, see docs/STARTER.md


def starter_model_path() -> Path:
    """The signed starter sprite diffusion model that ships inside the package."""
    from importlib import resources

    return Path(str(resources.files("anygpu").joinpath("models", STARTER_MODEL)))


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A failed signature is exit 1 here (as ``anygpu verify``); everything else is the CLI's."""
    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except TamperedError as error:
            print(f"anygpu: error: {' '.join(str(error).split())}", file=sys.stderr)
            return EXIT_TAMPERED
    return run


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``predict``, ``eval`` and ``sample`` to the ``anygpu`` command."""
    from anygpu.infer import evaluate, predict, sample

    parser = subparsers.add_parser(
        "predict", help="classify images with a digits, mnist or classifier model",
        description="Classify image files (or folders of them) with a model written by 'anygpu train "
                    "digits|mnist|classifier'. One line per image: path<TAB>label<TAB>probability "
                    "(then further label<TAB>probability pairs with --top-k). Exit 1: the model fails "
                    "its NanoSign check; 2: bad arguments, an unreadable or non-image input, a model of another kind.",
    )
    parser.add_argument("model", type=Path, metavar="MODEL", help="a model.safetensors written by anygpu train")
    parser.add_argument("inputs", type=Path, nargs="+", metavar="INPUT",
                        help="image files (PNG, JPEG, BMP, GIF, WebP) or folders searched recursively for them")
    parser.add_argument("--top-k", type=positive_int, default=1, metavar="K",
                        help="report the K most probable classes (default 1; at most the number of classes)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON array of {path, label, probability, top_k: [{label, probability}]}")
    parser.add_argument("--batch-size", type=positive_int, default=64, metavar="N",
                        help="images per forward pass (default 64)")
    parser.set_defaults(func=_guarded(predict.run))

    parser = subparsers.add_parser(
        "eval", help="accuracy and loss of a classifier model on a data set",
        description="Accuracy and mean cross-entropy of a digits, mnist or classifier model on a data set: "
                    "MNIST IDX files, or a folder of class folders of images, split as 'anygpu train' splits it.",
    )
    parser.add_argument("model", type=Path, metavar="MODEL", help="a model.safetensors written by anygpu train")
    parser.add_argument("--data", type=Path, metavar="DIR",
                        help="IDX files (train-/t10k-images/labels) or a folder of class folders; "
                             "a digits model without --data uses scikit-learn's bundled digits")
    parser.add_argument("--split", choices=("test", "all"), default="test",
                        help="'test' (default): the held-out split that 'anygpu train' reports on; 'all': every image")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a line")
    parser.set_defaults(func=_guarded(evaluate.run))

    parser = subparsers.add_parser(
        "sample", help="draw sprites with a diffusion model (default: the bundled starter model)",
        description="Draw N images with a diffusion model written by 'anygpu train diffusion' (without MODEL, "
                    "the signed starter model bundled in the package) using DDIM's deterministic sampler with "
                    "S steps, and save them as one PNG grid. The same seed gives the same pixels on one adapter.",
    )
    parser.add_argument("model", type=Path, nargs="?", metavar="MODEL",
                        help="a diffusion model.safetensors (default: the bundled starter model)")
    parser.add_argument("-n", type=positive_int, default=16, metavar="N", help="images to draw (default 16)")
    parser.add_argument("--steps", type=positive_int, default=sample.DEFAULT_STEPS, metavar="S",
                        help=f"DDIM steps (default {sample.DEFAULT_STEPS}; at most the model's timesteps)")
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="K",
                        help="seed of the starting noise (default 0)")
    parser.add_argument("--out", type=Path, default=Path("samples.png"), metavar="FILE.png",
                        help="the PNG grid to write (default samples.png)")
    parser.set_defaults(func=_guarded(sample.run))
