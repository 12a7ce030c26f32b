"""The training loop every stratagem shares: epochs, progress, evaluation, checkpoints, resume.

After each epoch the loop writes, in the run folder (``--out``):

- ``checkpoint.safetensors``: model weights under ``model.``, optimizer state under
  ``optim.``; the header metadata holds the epoch, seed, stratagem, settings, scheduler
  state, the RNG state and the history (all JSON strings). NanoSign-signed, atomic.
- ``model.safetensors``: the weights alone (names as in ``model.state_dict()``), signed.
- ``metrics.json``: the last epoch's numbers at the top level, every epoch in ``history``.
- ``loss.png``: the loss curve (per step and per epoch), with test accuracy when there is one.

A resumed run rebuilds the same model and optimizer, loads the checkpoint (verifying its
signature) and continues at the next epoch. Batch order and per-step randomness are
functions of (seed, epoch, step) only, so on the same adapter it ends with the same
weights, bit for bit, as a run that was never interrupted.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import numpy as np

import anygpu as ag
from anygpu import optim
from anygpu.io import checkpoint, nanosign
from anygpu.io.datasets import Dataset, batches
from anygpu.tensor import default_generator

__all__ = ["Settings", "Task", "fit", "CHECKPOINT", "MODEL", "METRICS", "LOSS_PLOT"]

CHECKPOINT = "checkpoint.safetensors"
MODEL = "model.safetensors"
METRICS = "metrics.json"
LOSS_PLOT = "loss.png"
CHECKPOINT_FORMAT = "anygpu-checkpoint-1"


@dataclass
class Settings:
    """One training run, as resolved from the command line and the stratagem's defaults.

    epochs is the total number of epochs; a resumed run trains from the checkpoint's
    epoch + 1 up to it. limit (for tests) keeps only the first `limit` samples of each split.
    extra holds stratagem-specific options (e.g. diffusion's timesteps).
    """

    stratagem: str
    epochs: int
    batch_size: int
    lr: float
    seed: int
    out: Path
    data: Path | None = None
    limit: int | None = None
    resume: bool = False
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        values = asdict(self)
        values["out"] = str(self.out)
        values["data"] = None if self.data is None else str(self.data)
        return json.dumps(values, sort_keys=True)


class Task(Protocol):
    """What a stratagem hands the loop.

    Attributes:
        model: an ``anygpu.nn.Module``.
        optimizer: an ``anygpu.optim`` optimizer over the model's parameters.
        scheduler: an ``anygpu.optim`` LR scheduler or None; stepped after each optimizer
            step when ``scheduler_per_step``, otherwise after each epoch.
        train_data: a ``Dataset`` (x, y) or an array x of shape (N, ...) without labels.
        has_test: whether ``evaluate`` reports ``test_accuracy``.
        extra_files: names of further files ``end_epoch`` wrote in the run folder.
    """

    model: Any
    optimizer: Any
    scheduler: Any
    scheduler_per_step: bool
    train_data: Dataset | np.ndarray
    has_test: bool
    extra_files: list[str]

    def describe(self) -> str:
        """A short phrase for the first line, e.g. '1437 train / 360 test images of 1x8x8'."""

    def loss(self, x: np.ndarray, y: np.ndarray | None, rng: np.random.Generator) -> "ag.Tensor":
        """The mean loss of one batch (a 1-element Tensor that requires grad)."""

    def evaluate(self) -> dict[str, float]:
        """Numbers on the test split (``test_accuracy``, ``test_loss``), {} without one."""

    def end_epoch(self, out: Path, epoch: int, last: bool) -> dict[str, Any]:
        """Extra work after an epoch (e.g. writing samples.png); returns extra metrics."""

    def model_metadata(self) -> dict[str, str]:
        """str -> str facts for model.safetensors' header (classes, input shape, ...)."""

    def result(self, record: Mapping[str, Any]) -> str:
        """The headline of the final line, e.g. 'test accuracy 0.975'."""


# --------------------------------------------------------------------------- checkpoints


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, ag.Tensor):
        return value.numpy().tolist()
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _save_checkpoint(task: Task, settings: Settings, epoch: int, history: list[dict],
                     curve: list[list[float]], path: Path) -> None:
    arrays: dict[str, Any] = {f"model.{name}": value for name, value in task.model.state_dict().items()}
    arrays.update(optim.flatten_state_dict(task.optimizer.state_dict(), prefix="optim."))
    scheduler_state = task.scheduler.state_dict() if task.scheduler is not None else None
    metadata = {
        "format": CHECKPOINT_FORMAT,
        "anygpu_version": ag.__version__,
        "stratagem": settings.stratagem,
        "epoch": str(epoch),
        "seed": str(settings.seed),
        "settings": settings.to_json(),
        "scheduler": json.dumps(scheduler_state, default=_json_default),
        "rng": json.dumps(default_generator().bit_generator.state),
        "history": json.dumps(history),
        "curve": json.dumps(curve),
    }
    checkpoint.save(arrays, path, metadata=metadata)


@dataclass
class _Resumed:
    epoch: int
    history: list[dict]
    curve: list[list[float]]


def read_checkpoint_settings(path: Path, stratagem: str) -> tuple[dict[str, np.ndarray], dict[str, str], dict]:
    """Verify and read a checkpoint; return (arrays, metadata, the settings it was run with).

    Raises FileNotFoundError (no checkpoint), TamperedError (signature mismatch) or
    ValueError (unsigned, not an anygpu checkpoint, or another stratagem's).
    """
    if not path.is_file():
        raise FileNotFoundError(f"--resume: no {CHECKPOINT} in {path.parent} to resume from")
    arrays, metadata = checkpoint.load_with_metadata(path)
    if metadata.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"--resume: {path} is not an anygpu training checkpoint")
    if metadata.get("stratagem") != stratagem:
        raise ValueError(
            f"--resume: {path} is a checkpoint of '{metadata.get('stratagem')}', not '{stratagem}'"
        )
    return arrays, metadata, _header_json(metadata, "settings", path)


def _header_json(metadata: Mapping[str, str], key: str, path: Path) -> Any:
    """One JSON entry of a checkpoint's header, or a ValueError that names it."""
    try:
        return json.loads(metadata[key])
    except KeyError:
        raise ValueError(f"--resume: {path} has no '{key}' entry; it was not written by anygpu train") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"--resume: {path} has a damaged '{key}' entry ({error})") from None


def _restore(task: Task, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str], path: Path) -> _Resumed:
    weights = {name[len("model."):]: value for name, value in arrays.items() if name.startswith("model.")}
    try:
        task.model.load_state_dict(weights)
        task.optimizer.load_state_dict(optim.unflatten_state_dict(arrays, prefix="optim."))
    except (KeyError, RuntimeError, ValueError) as error:  # state_dict mismatch: a different model
        raise ValueError(f"--resume: {path} does not fit this model ({error})") from None
    scheduler_state = _header_json(metadata, "scheduler", path)
    if task.scheduler is not None and scheduler_state is not None:
        task.scheduler.load_state_dict(scheduler_state)
    default_generator().bit_generator.state = _header_json(metadata, "rng", path)
    return _Resumed(int(_header_json(metadata, "epoch", path)), _header_json(metadata, "history", path),
                    _header_json(metadata, "curve", path))


# --------------------------------------------------------------------------- outputs


def _write_json(path: Path, value: Any) -> None:
    text = json.dumps(value, indent=2, default=_json_default) + "\n"
    nanosign.atomic_write_bytes(path, text.encode())


def _plot_loss(path: Path, curve: list[list[float]], history: list[dict], title: str) -> None:
    """loss.png: per-step loss (thin), per-epoch mean (dots), test accuracy (right axis)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=110)
    FigureCanvasAgg(figure)
    axis = figure.add_subplot(1, 1, 1)
    if curve:
        steps = np.asarray(curve, dtype=np.float64)
        axis.plot(steps[:, 0], steps[:, 1], linewidth=0.8, alpha=0.5, color="tab:blue", label="train loss (step)")
    epochs = [record["epoch"] for record in history]
    axis.plot(epochs, [record["train_loss"] for record in history], "o-", color="tab:blue", label="train loss (epoch)")
    losses = [value for _, value in curve] + [record["train_loss"] for record in history]
    if losses and min(losses) > 0:
        axis.set_yscale("log")
    axis.set_xlabel("epoch")
    axis.set_ylabel("loss")
    axis.grid(True, alpha=0.3)
    handles, labels = axis.get_legend_handles_labels()
    accuracy = [(record["epoch"], record["test_accuracy"]) for record in history if "test_accuracy" in record]
    if accuracy:
        right = axis.twinx()
        right.plot(*zip(*accuracy), "s--", color="tab:orange", label="test accuracy")
        right.set_ylabel("test accuracy")
        right.set_ylim(0.0, 1.0)
        more_handles, more_labels = right.get_legend_handles_labels()
        handles, labels = handles + more_handles, labels + more_labels
    axis.legend(handles, labels, loc="best", fontsize="small")
    axis.set_title(title, fontsize="medium")
    figure.tight_layout()
    with nanosign.atomic_writer(path) as handle:
        figure.savefig(handle, format="png")


# --------------------------------------------------------------------------- the loop


def _progress_bar(total: int, description: str, enabled: bool):
    from tqdm import tqdm

    interactive = sys.stderr.isatty()
    return tqdm(
        total=total, desc=description, unit="sample", file=sys.stderr, leave=not interactive,
        dynamic_ncols=True, disable=not enabled,
        # A log file gets a line every 30 s instead of a redraw every 0.1 s.
        mininterval=0.1 if interactive else 30.0,
    )


def _format_record(record: Mapping[str, Any], epochs: int) -> str:
    parts = [f"epoch {record['epoch']}/{epochs}", f"train loss {record['train_loss']:.4f}"]
    if "test_accuracy" in record:
        parts.append(f"test accuracy {record['test_accuracy']:.4f}")
    if "test_loss" in record:
        parts.append(f"test loss {record['test_loss']:.4f}")
    parts.append(f"{record['samples_per_second']:.0f} samples/s")
    if "steps_per_second" in record:
        parts.append(f"{record['steps_per_second']:.2f} steps/s")
    parts.append(f"{record['epoch_seconds']:.1f} s")
    return ", ".join(parts)


def fit(task_factory: Callable[[Settings], Task], settings: Settings,
        resume_from: tuple[Mapping[str, np.ndarray], Mapping[str, str]] | None = None,
        print_line: Callable[[str], None] = print) -> dict[str, Any]:
    """Train (or resume) one run; write the files in ``settings.out``; return the final metrics.

    resume_from: (arrays, metadata) of a verified checkpoint (``read_checkpoint_settings``);
    when None and ``settings.resume``, the checkpoint in ``settings.out`` is read here.
    The last line printed states the result, e.g.
    ``test accuracy 0.975 on llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan) in 41.2 s``.
    """
    out = Path(settings.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out}: exists and is not a directory")
    checkpoint_path = out / CHECKPOINT
    saved = resume_from
    if saved is None and settings.resume:
        saved = read_checkpoint_settings(checkpoint_path, settings.stratagem)[:2]

    ag.manual_seed(settings.seed)
    task = task_factory(settings)  # data first: a bad folder fails before any GPU work
    dev = ag.gpu()
    adapter = f"{dev.adapter_name} ({dev.backend})"
    out.mkdir(parents=True, exist_ok=True)

    history: list[dict] = []
    curve: list[list[float]] = []
    start_epoch = 1
    if saved is not None:
        resumed = _restore(task, saved[0], saved[1], checkpoint_path)
        start_epoch, history, curve = resumed.epoch + 1, resumed.history, resumed.curve
    seconds_before = history[-1]["seconds"] if history else 0.0

    print_line(
        f"training {settings.stratagem} on {adapter}: {task.describe()}; "
        f"epochs {settings.epochs}, batch size {settings.batch_size}, lr {settings.lr:g}, seed {settings.seed}"
        + (f", resuming at epoch {start_epoch}" if saved is not None else "")
    )
    if start_epoch > settings.epochs:
        print_line(f"{checkpoint_path} is already at epoch {start_epoch - 1} of {settings.epochs}; nothing to train")

    n_train = len(task.train_data)
    started = time.perf_counter()
    for epoch in range(start_epoch, settings.epochs + 1):
        epoch_started = time.perf_counter()
        task.model.train()
        losses: list[float] = []
        steps = math.ceil(n_train / settings.batch_size)
        bar = _progress_bar(n_train, f"epoch {epoch}/{settings.epochs}", settings.progress)
        try:
            batch_iter = batches(task.train_data, settings.batch_size, shuffle=True,
                                 seed=settings.seed, epoch=epoch - 1)
            for step, (x, y) in enumerate(batch_iter):
                rng = np.random.default_rng([settings.seed, epoch, step])
                loss = task.loss(x, y, rng)
                task.optimizer.zero_grad()
                loss.backward()
                task.optimizer.step()
                if task.scheduler is not None and task.scheduler_per_step:
                    task.scheduler.step()
                value = float(loss.item())
                if not math.isfinite(value):
                    raise ValueError(
                        f"train {settings.stratagem}: the loss became {value} at epoch {epoch}, step {step + 1}; "
                        f"try a smaller --lr than {settings.lr:g}"
                    )
                losses.append(value)
                curve.append([epoch - 1 + (step + 1) / steps, value])
                bar.update(len(x))
                bar.set_postfix(loss=f"{value:.4f}", refresh=False)
        finally:
            bar.close()
        train_seconds = time.perf_counter() - epoch_started
        if task.scheduler is not None and not task.scheduler_per_step:
            task.scheduler.step()

        task.model.eval()
        with ag.no_grad():
            evaluation = task.evaluate()
            extra = task.end_epoch(out, epoch, last=epoch == settings.epochs)
        epoch_seconds = time.perf_counter() - epoch_started
        record: dict[str, Any] = {
            "epoch": epoch,
            "train_loss": float(np.mean(losses)),
            **evaluation,
            "samples_per_second": n_train / train_seconds,
            "steps_per_second": len(losses) / train_seconds,
            "epoch_seconds": epoch_seconds,
            "seconds": seconds_before + (time.perf_counter() - started),
            "lr": float(task.optimizer.param_groups[0]["lr"]),
            "adapter": adapter,
            **extra,
        }
        history.append(record)
        _save_checkpoint(task, settings, epoch, history, curve, checkpoint_path)
        checkpoint.save(task.model.state_dict(), out / MODEL,
                        metadata={"stratagem": settings.stratagem, "epoch": str(epoch), **task.model_metadata()})
        _write_json(out / METRICS, {**record, "stratagem": settings.stratagem, "seed": settings.seed,
                                    "settings": json.loads(settings.to_json()), "history": history})
        _plot_loss(out / LOSS_PLOT, curve, history, f"anygpu train {settings.stratagem} on {adapter}")
        print_line(_format_record(record, settings.epochs))

    if not history:
        raise ValueError(f"train {settings.stratagem}: no epoch was trained (--epochs {settings.epochs})")
    final = history[-1]
    written = [MODEL, CHECKPOINT, METRICS, LOSS_PLOT, *task.extra_files]
    print_line("wrote " + ", ".join(str(out / name) for name in written))
    print_line(f"{task.result(final)} on {adapter} in {final['seconds']:.1f} s")
    return final
