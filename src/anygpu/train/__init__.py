"""``anygpu train {digits,mnist,classifier,diffusion}``: the stratagems and the shared loop.

``register(subparsers)`` adds the ``train`` command; each stratagem takes
``--epochs --batch-size --lr --out DIR --resume --seed`` (and ``--data DIR`` where it reads
files). The stratagem modules import ``anygpu.nn`` only when a run starts, so ``anygpu
info`` and friends never pay for it.
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from anygpu.train.loop import CHECKPOINT, PRECISIONS, Settings, fit, read_checkpoint_settings

__all__ = ["Stratagem", "STRATAGEMS", "register", "run", "Settings", "fit", "positive_int", "non_negative_int",
           "positive_float"]


@dataclass(frozen=True)
class Stratagem:
    """A named recipe: defaults, whether it reads --data, and where its builder lives."""

    name: str
    summary: str
    epochs: int
    batch_size: int
    lr: float
    data: str  # "required", "optional" or "none"
    builder: str  # "module:function" returning a loop.Task for a Settings

    def build(self, settings: Settings):
        module, function = self.builder.split(":")
        return getattr(importlib.import_module(module), function)(settings)


STRATAGEMS: dict[str, Stratagem] = {
    s.name: s
    for s in (
        Stratagem("digits", "scikit-learn's 8x8 handwritten digits (bundled, no download), a small CNN",
                  epochs=8, batch_size=32, lr=4e-3, data="none",
                  builder="anygpu.train.stratagems:build_digits"),
        Stratagem("mnist", "MNIST / Fashion-MNIST from IDX files (raw or .gz) in --data, LeNet-5",
                  epochs=3, batch_size=64, lr=1e-3, data="required",
                  builder="anygpu.train.stratagems:build_mnist"),
        Stratagem("classifier", "a folder of class folders of images in --data, a small CNN at 32x32",
                  epochs=10, batch_size=32, lr=1e-3, data="required",
                  builder="anygpu.train.stratagems:build_classifier"),
        # 60 epochs of 2048 sprites (3840 steps) at width 64: ~3 min on an H200, many hours on a CPU adapter.
        Stratagem("diffusion", "a small DDPM on 32x32 sprites (procedural, or images in --data); writes samples.png",
                  epochs=60, batch_size=32, lr=2e-3, data="optional",
                  builder="anygpu.train.diffusion:build_diffusion"),
    )
}

# Options that define a run. With --resume their values come from the checkpoint; giving
# a different one is an error, since the result would be neither run.
_RUN_DEFINING = ("seed", "batch_size", "lr", "limit")
_EXTRA = {"digits": (), "mnist": (), "classifier": ("size",),
          "diffusion": ("timesteps", "sample_steps", "samples", "width")}


def _number(parse, what: str, accept):
    """An argparse type: `parse` the text and check it with `accept`, else say `what` was expected."""
    def convert(text: str):
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value
    return convert


# The argparse types of the train commands, shared with anygpu.infer's commands.
positive_int = _number(int, "a positive integer", lambda v: v >= 1)
non_negative_int = _number(int, "a non-negative integer", lambda v: v >= 0)
positive_float = _number(float, "a positive number", lambda v: 0 < v < float("inf"))


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``train`` with one sub-command per stratagem; each sets ``func`` to ``run``."""
    train = subparsers.add_parser(
        "train", help="train one of the built-in stratagems (digits, mnist, classifier, diffusion)",
        description="Train a stratagem; checkpoints every epoch and resumes where it stopped.",
    )
    stratagems = train.add_subparsers(dest="stratagem", metavar="STRATAGEM")
    stratagems.required = True
    for stratagem in STRATAGEMS.values():
        parser = stratagems.add_parser(stratagem.name, help=stratagem.summary, description=stratagem.summary)
        if stratagem.data != "none":
            parser.add_argument(
                "--data", type=Path, metavar="DIR", required=stratagem.data == "required",
                help="the data folder" + (" (default: procedurally drawn sprites)" if stratagem.data == "optional" else ""),
            )
        parser.add_argument("--epochs", type=positive_int, metavar="N",
                            help=f"total epochs (default {stratagem.epochs}; on --resume, the checkpoint's)")
        parser.add_argument("--batch-size", type=positive_int, metavar="N",
                            help=f"samples per step (default {stratagem.batch_size})")
        parser.add_argument("--lr", type=positive_float, metavar="LR",
                            help=f"peak learning rate (default {stratagem.lr:g})")
        parser.add_argument("--out", type=Path, metavar="DIR",
                            help=f"run folder for weights, checkpoint, metrics and plots (default runs/{stratagem.name})")
        parser.add_argument("--resume", action="store_true",
                            help="continue from DIR/checkpoint.safetensors (signature verified) at the next epoch")
        parser.add_argument("--seed", type=non_negative_int, metavar="N",
                            help="seed of initialisation and batch order (default 0)")
        # For tests and quick looks: the first N samples of each split only.
        parser.add_argument("--limit", type=positive_int, help=argparse.SUPPRESS)
        parser.add_argument("--no-progress", dest="progress", action="store_false", help=argparse.SUPPRESS)
        parser.add_argument("--tensorboard", type=Path, metavar="DIR",
                            help="also write TensorBoard event files to DIR: loss and learning rate per step, "
                                 "loss, accuracy, learning rate and samples/s per epoch (needs anygpu[tensorboard])")
        parser.add_argument("--precision", choices=list(PRECISIONS), default="32",
                            help="32: float32 throughout (default); 16-mixed: the forward under autocast "
                                 "(float16 products on matrix units where the GPU has them, float32 master weights "
                                 "and reductions) with a GradScaler")
        parser.add_argument("--balance", choices=["throughput"],
                            help="under mpiexec: split each global batch across ranks by their measured speed")
        if stratagem.name == "classifier":
            parser.add_argument("--size", type=positive_int, metavar="PX",
                                help="images are centre-cropped and resized to PX x PX (default 32)")
        if stratagem.name == "diffusion":
            for option in ("--timesteps", "--sample-steps", "--samples", "--width"):
                parser.add_argument(option, type=positive_int, help=argparse.SUPPRESS)
        parser.set_defaults(func=run)


def resolve(args: argparse.Namespace) -> tuple[Stratagem, Settings, Any]:
    """Command-line values, else the checkpoint's (on --resume), else the stratagem's defaults.

    Returns (stratagem, settings, (arrays, metadata) of the checkpoint or None).
    """
    stratagem = STRATAGEMS[args.stratagem]
    out = args.out if args.out is not None else Path("runs") / stratagem.name
    given: dict[str, Any] = {key: getattr(args, key, None) for key in _RUN_DEFINING}
    extra = {key: getattr(args, key, None) for key in _EXTRA[stratagem.name]}
    epochs = args.epochs
    data = getattr(args, "data", None)
    saved = None
    if args.resume:
        arrays, metadata, before = read_checkpoint_settings(out / CHECKPOINT, stratagem.name)
        saved = (arrays, metadata)
        for key in _RUN_DEFINING:
            if given[key] is not None and given[key] != before.get(key):
                option = "--" + key.replace("_", "-")
                raise ValueError(
                    f"--resume: {option} {given[key]} differs from the checkpoint's {before.get(key)}; "
                    f"leave it out to continue the same run"
                )
            given[key] = before.get(key)
        for key, value in extra.items():
            saved_value = before.get("extra", {}).get(key)
            if value is not None and value != saved_value:
                raise ValueError(f"--resume: --{key.replace('_', '-')} {value} differs from the checkpoint's {saved_value}")
            extra[key] = saved_value
        if epochs is None:
            epochs = before.get("epochs")
        if data is None and before.get("data"):  # the folder may have moved: --data wins when given
            data = Path(before["data"])
    settings = Settings(
        stratagem=stratagem.name,
        epochs=epochs if epochs is not None else stratagem.epochs,
        batch_size=given["batch_size"] if given["batch_size"] is not None else stratagem.batch_size,
        lr=given["lr"] if given["lr"] is not None else stratagem.lr,
        seed=given["seed"] if given["seed"] is not None else 0,
        out=out,
        data=data,
        limit=given["limit"],
        resume=args.resume,
        progress=args.progress,
        extra={key: value for key, value in extra.items() if value is not None},
        balance=getattr(args, "balance", None),
        tensorboard=getattr(args, "tensorboard", None),
        precision=PRECISIONS[getattr(args, "precision", None) or "32"],
    )
    return stratagem, settings, saved


def run(args: argparse.Namespace, print_line: Callable[[str], None] = print) -> int:
    """The ``anygpu train STRATAGEM`` command; returns the exit code (0)."""
    stratagem, settings, saved = resolve(args)
    fit(stratagem.build, settings, resume_from=saved, print_line=print_line)
    return 0
