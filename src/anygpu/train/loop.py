"""The training loop every stratagem shares: epochs, progress, evaluation, checkpoints, resume.

After each epoch the loop writes, in the run folder (``--out``):

- ``checkpoint.safetensors``: model weights under ``model.``, optimizer state under
  ``optim.``; the header metadata holds the epoch, seed, stratagem, settings, scheduler
  state, the GradScaler's state (``--precision 16-mixed``), the RNG state and the history
  (all JSON strings). NanoSign-signed, atomic.
- ``model.safetensors``: the weights alone (names as in ``model.state_dict()``), signed.
- ``metrics.json``: the last epoch's numbers at the top level, every epoch in ``history``.
- ``loss.png``: the loss curve (per step and per epoch), with test accuracy when there is one;
  drawn with matplotlib, the optional extra ``pip install 'anygpu[plot]'`` (without it the run
  says once that no plot was written).

A resumed run rebuilds the same model and optimizer, loads the checkpoint (verifying its
signature) and continues at the next epoch. Batch order and per-step randomness are
functions of (seed, epoch, step) only, so on the same adapter it ends with the same
weights, bit for bit, as a run that was never interrupted.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import numpy as np

import anygpu as ag
from anygpu import bounded_json, optim
from anygpu.io import checkpoint, nanosign
from anygpu.io.datasets import Dataset, batches
from anygpu.train import data_parallel
from anygpu.tensor import default_generator

__all__ = ["Settings", "Task", "fit", "CHECKPOINT", "MODEL", "METRICS", "LOSS_PLOT"]

CHECKPOINT = "checkpoint.safetensors"
MODEL = "model.safetensors"
METRICS = "metrics.json"
LOSS_PLOT = "loss.png"
CHECKPOINT_FORMAT = "anygpu-checkpoint-1"


# --precision values (Lightning's names) -> the one this trainer runs
PRECISIONS = {"32": "32", "32-true": "32", "16-mixed": "16-mixed"}


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
    balance: str | None = None  # under mpiexec: "throughput" splits each global batch by rank speed
    tensorboard: Path | None = None  # --tensorboard DIR: TensorBoard event files of the run
    precision: str = "32"  # "32" or "16-mixed" (--precision): the forward under float16 autocast, a GradScaler

    def to_json(self) -> str:
        values = asdict(self)
        values["out"] = str(self.out)
        values["data"] = None if self.data is None else str(self.data)
        values["tensorboard"] = None if self.tensorboard is None else str(self.tensorboard)
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
                     curve: list[list[float]], path: Path, scaler=None) -> None:
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
        # 16-mixed: the GradScaler's scale and growth tracker ({} under 32), so a resumed run
        # skips and grows its steps as the uninterrupted one does.
        "scaler": json.dumps(scaler.state_dict() if scaler is not None else {}),
    }
    checkpoint.save(arrays, path, metadata=metadata)


@dataclass
class _Resumed:
    epoch: int
    history: list[dict]
    curve: list[list[float]]


def read_checkpoint_settings(path: Path, stratagem: str) -> tuple[dict[str, np.ndarray], dict[str, str], dict]:
    """Verify and read a checkpoint; return (arrays, metadata, the settings it was run with).

    Every header field is checked here, before anything is built or written: a signed
    file with malformed content (re-signed after an edit, or written by a buggy version)
    is a ValueError naming the field, never a traceback later.
    Raises FileNotFoundError (no checkpoint), TamperedError (signature mismatch) or
    ValueError (unsigned, not an anygpu checkpoint, another stratagem's, a bad field).
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
    _check_header(metadata, path)
    return arrays, metadata, _header_json(metadata, "settings", path)


def _header_json(metadata: Mapping[str, str], key: str, path: Path) -> Any:
    """One JSON entry of a checkpoint's header, or a ValueError that names it."""
    if key not in metadata:
        raise ValueError(f"--resume: {path} has no '{key}' entry; it was not written by anygpu train")
    try:  # bounded: "[[[[..." nested past the limit is refused before json recurses
        return bounded_json.loads(metadata[key], f"--resume: {path}: the '{key}' entry")
    except ValueError as error:
        raise ValueError(f"{error}; the checkpoint is damaged") from None


def _is_int(value: Any, minimum: int) -> bool:
    return type(value) is int and value >= minimum


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


_SETTINGS_FIELDS: dict[str, Callable[[Any], bool]] = {
    "stratagem": lambda v: isinstance(v, str),
    "epochs": lambda v: _is_int(v, 1),
    "batch_size": lambda v: _is_int(v, 1),
    "lr": lambda v: _is_number(v) and v > 0,
    "seed": lambda v: _is_int(v, 0),
    "out": lambda v: isinstance(v, str),
    "data": lambda v: v is None or isinstance(v, str),
    "limit": lambda v: v is None or _is_int(v, 1),
    "resume": lambda v: isinstance(v, bool),
    "progress": lambda v: isinstance(v, bool),
    "extra": lambda v: isinstance(v, dict) and all(_is_int(item, 1) for item in v.values()),
}
# Numbers every history record holds (what the progress lines, plot and result read).
_RECORD_NUMBERS = ("train_loss", "samples_per_second", "epoch_seconds", "seconds")


def _check_header(metadata: Mapping[str, str], path: Path) -> None:
    """Validate every field ``_restore`` and ``resolve`` read; a ValueError names the first bad one."""
    def bad(key: str, expected: str, value: Any) -> ValueError:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return ValueError(f"--resume: {path} has a bad '{key}' entry: expected {expected}, got {shown}")

    epoch_text = metadata.get("epoch")
    if not isinstance(epoch_text, str) or not epoch_text.isascii() or not epoch_text.isdigit() \
            or len(epoch_text) > 9 or int(epoch_text) < 1:
        raise bad("epoch", "a positive integer", epoch_text)
    epoch = int(epoch_text)
    settings = _header_json(metadata, "settings", path)
    if not isinstance(settings, dict):
        raise bad("settings", "a JSON object", settings)
    for key, accept in _SETTINGS_FIELDS.items():
        if key not in settings or not accept(settings[key]):
            raise bad(f"settings.{key}", "a valid value", settings.get(key, "(missing)"))
    if settings["stratagem"] != metadata.get("stratagem"):
        raise bad("settings.stratagem", repr(metadata.get("stratagem")), settings["stratagem"])
    if metadata.get("seed") != str(settings["seed"]):
        raise bad("seed", f"'{settings['seed']}' as in settings", metadata.get("seed"))
    history = _header_json(metadata, "history", path)
    if not isinstance(history, list) or len(history) != epoch:
        raise bad("history", f"a list of {epoch} records (one per epoch)", history)
    for number, record in enumerate(history, start=1):
        if not isinstance(record, dict) or record.get("epoch") != number or type(record.get("epoch")) is not int:
            raise bad(f"history[{number - 1}]", f"an object with epoch {number}", record)
        for key in _RECORD_NUMBERS:
            if not _is_number(record.get(key)):
                raise bad(f"history[{number - 1}].{key}", "a number", record.get(key, "(missing)"))
        for key, value in record.items():
            if not isinstance(key, str) or not (value is None or isinstance(value, (str, bool, int, float))):
                raise bad(f"history[{number - 1}].{key}", "a number or string", value)
    curve = _header_json(metadata, "curve", path)
    if not isinstance(curve, list) or not all(
            isinstance(point, list) and len(point) == 2 and all(_is_number(v) for v in point) for point in curve):
        raise bad("curve", "a list of [step, loss] number pairs", curve)
    rng = _header_json(metadata, "rng", path)
    probe = type(default_generator().bit_generator)()
    try:
        probe.state = rng
    except (ValueError, TypeError, KeyError, OverflowError, AttributeError):
        raise bad("rng", f"a {type(probe).__name__} state", rng) from None
    _header_json(metadata, "scheduler", path)  # checked against the scheduler in _restore
    if "scaler" in metadata:  # absent in checkpoints written before 16-mixed steps were resumable
        scaler = _header_json(metadata, "scaler", path)
        if not isinstance(scaler, dict) or (scaler and not _is_scaler_state(scaler)):
            raise bad("scaler", "a GradScaler state ({} under --precision 32)", scaler)


def _is_scaler_state(state: Mapping[str, Any]) -> bool:
    """Whether `state` is a GradScaler.state_dict() with values its rules accept."""
    return (set(state) == {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}
            and _is_number(state["scale"]) and state["scale"] > 0
            and _is_number(state["growth_factor"]) and state["growth_factor"] > 1
            and _is_number(state["backoff_factor"]) and 0 < state["backoff_factor"] < 1
            and _is_int(state["growth_interval"], 1) and _is_int(state["_growth_tracker"], 0))


def _same_structure(saved: Any, current: Any) -> bool:
    """Whether ``saved`` (from a file) has the types and sizes of ``current`` (a live state)."""
    if isinstance(current, bool) or current is None or isinstance(current, str):
        return type(saved) is type(current)
    if isinstance(current, int):
        return type(saved) is int
    if isinstance(current, float):
        return _is_number(saved) or (isinstance(saved, float) and not math.isnan(saved))
    if isinstance(current, (list, tuple)):
        return isinstance(saved, list) and len(saved) == len(current) and all(
            _same_structure(a, b) for a, b in zip(saved, current))
    if isinstance(current, dict):
        return isinstance(saved, dict) and saved.keys() == current.keys() and all(
            _same_structure(saved[key], current[key]) for key in current)
    return True  # a value of a kind JSON cannot hold was not saved as such; nothing to compare


def _restore(task: Task, arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str], path: Path,
             scaler=None) -> _Resumed:
    _check_header(metadata, path)
    scheduler_state = _header_json(metadata, "scheduler", path)
    if task.scheduler is not None and scheduler_state is not None:
        current = json.loads(json.dumps(task.scheduler.state_dict(), default=_json_default))
        if not _same_structure(scheduler_state, current):
            raise ValueError(f"--resume: {path} has a bad 'scheduler' entry: it does not match this run's scheduler")
    weights = {name[len("model."):]: value for name, value in arrays.items() if name.startswith("model.")}
    try:
        task.model.load_state_dict(weights)
        task.optimizer.load_state_dict(optim.unflatten_state_dict(arrays, prefix="optim."))
    except (KeyError, RuntimeError, ValueError, TypeError, IndexError) as error:  # a different model
        raise ValueError(f"--resume: {path} does not fit this model ({error})") from None
    if task.scheduler is not None and scheduler_state is not None:
        task.scheduler.load_state_dict(scheduler_state)
    scaler_state = _header_json(metadata, "scaler", path) if "scaler" in metadata else {}
    if scaler is not None and scaler.is_enabled() and scaler_state:
        scaler.load_state_dict(scaler_state)  # a 32 run resumed as 16-mixed starts a fresh scaler
    default_generator().bit_generator.state = _header_json(metadata, "rng", path)
    return _Resumed(int(metadata["epoch"]), _header_json(metadata, "history", path),
                    _header_json(metadata, "curve", path))


# --------------------------------------------------------------------------- outputs


def _write_outputs(task: Task, out: Path, stratagem: str, seed: int, settings_json: str,
                   history: list[dict], curve: list[list[float]]) -> list[str]:
    """model.safetensors, metrics.json and loss.png for the state after ``history[-1]``.

    Written right after each checkpoint, and again on a resume that finds nothing to
    train (a crash may have come between the checkpoint and these files): everything
    here is a function of the checkpoint's content, so both give the same files.
    Returns the names written.
    """
    record = history[-1]
    checkpoint.save(task.model.state_dict(), out / MODEL,
                    metadata={"stratagem": stratagem, "epoch": str(record["epoch"]), **task.model_metadata()})
    _write_json(out / METRICS, {**record, "stratagem": stratagem, "seed": seed,
                                "settings": json.loads(settings_json), "history": history})
    plotted = _plot_loss(out / LOSS_PLOT, curve, history, f"anygpu train {stratagem} on {record['adapter']}")
    return [MODEL, METRICS, *([LOSS_PLOT] if plotted else [])]


def _write_json(path: Path, value: Any) -> None:
    text = json.dumps(value, indent=2, default=_json_default) + "\n"
    nanosign.atomic_write_bytes(path, text.encode())


NO_PLOT = f"no {LOSS_PLOT} written: matplotlib is not installed (pip install 'anygpu[plot]')"


def _plot_loss(path: Path, curve: list[list[float]], history: list[dict], title: str) -> bool:
    """loss.png: per-step loss (thin), per-epoch mean (dots), test accuracy (right axis).
    False, and nothing written, without matplotlib (the optional extra anygpu[plot])."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return False

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
    return True


# --------------------------------------------------------------------------- TensorBoard


def _open_tensorboard(settings: Settings, purge_step: int):
    """A SummaryWriter on --tensorboard DIR, or None without the option."""
    if settings.tensorboard is None:
        return None
    from anygpu.utils.tensorboard import SummaryWriter
    try:
        return SummaryWriter(settings.tensorboard, purge_step=purge_step)
    except ImportError as error:  # the CLI reports a ValueError as one line
        raise ValueError(f"--tensorboard: {error}") from None


def _log_epoch(board, record: Mapping[str, Any], global_step: int) -> None:
    """The epoch's numbers under epoch/ at its last step; flushed, so a crash keeps them."""
    for key in ("train_loss", "test_accuracy", "test_loss", "samples_per_second", "steps_per_second", "lr"):
        if key in record:
            board.add_scalar(f"epoch/{key}", record[key], global_step)
    board.flush()


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


@contextlib.contextmanager
def _precision_region(mixed: bool, model=None):
    """The forward's region: float16 autocast under 16-mixed, nothing under 32. With `model`,
    the float16 copies of its weights are made as the region starts, in one dispatch
    (amp.cast_ahead), rather than one conversion at each weight's first use."""
    if not mixed:
        yield
        return
    with ag.autocast("cuda", dtype=ag.float16):
        if model is not None:
            ag.amp.cast_ahead(model.parameters())
        yield


def _backward_and_step(task: Task, scaler, loss, sync: Callable[[], None] | None = None) -> None:
    """The optimizer step of a loss: torch's mixed-precision recipe (zero_grad, scaled
    backward, scaler.step, scaler.update); with a disabled scaler the plain step.
    sync (data parallel, eager) averages the gradients across ranks before the step."""
    task.optimizer.zero_grad()
    scaler.scale(loss).backward()
    if sync is not None:
        sync()
    scaler.step(task.optimizer)
    scaler.update()


def _compiled_step(task: Task, scaler=None, mixed: bool = False):
    """The task's training step through anygpu.compile (capture and replay), when the task
    splits its loss into `inputs(x, y, rng)` (host work, Tensors out) and `loss_of(*inputs)`
    (GPU work only). ANYGPU_COMPILE=0 keeps every step eager.

    16-mixed (`mixed`, with an enabled GradScaler) is captured too: the forward under float16
    autocast, the scaler's inf check, skip decision (for optimizers that take its found_inf
    flag: SGD, Adam, AdamW) and next scale all stay on the GPU, so the step reads nothing back
    and is replayed like a float32 one (another optimizer makes the scaler read the flag: then
    the step runs eagerly, `step.reason()` says where)."""
    if os.environ.get("ANYGPU_COMPILE", "1") == "0" or not hasattr(task, "inputs") or not hasattr(task, "loss_of"):
        return None
    if scaler is None:
        scaler = ag.amp.GradScaler("cuda", enabled=False)

    def train_step(*inputs):
        with _precision_region(mixed, task.model):
            loss = task.loss_of(*inputs)
        _backward_and_step(task, scaler, loss)
        return loss
    return ag.compile(train_step)


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

    parallel = data_parallel.start(settings.balance)  # before any tensor: picks this rank's GPU
    writes = parallel is None or parallel.writes  # under MPI only rank 0 writes files and prints
    if not writes:
        print_line = lambda line: None  # noqa: E731
    ag.manual_seed(settings.seed)
    task = task_factory(settings)  # data first: a bad folder fails before any GPU work
    dev = ag.gpu()
    adapter = f"{dev.adapter_name} ({dev.backend})"
    if writes:
        out.mkdir(parents=True, exist_ok=True)

    history: list[dict] = []
    curve: list[list[float]] = []
    start_epoch = 1
    mixed = settings.precision == "16-mixed"
    scaler = ag.amp.GradScaler("cuda", enabled=mixed)
    if saved is not None:
        resumed = _restore(task, saved[0], saved[1], checkpoint_path, scaler)
        start_epoch, history, curve = resumed.epoch + 1, resumed.history, resumed.curve
    # Only now, with the checkpoint validated: the leftovers of a run killed mid-write.
    if writes:
        nanosign.remove_stale_temporaries(out)
    seconds_before = history[-1]["seconds"] if history else 0.0
    written: list[str] = []  # only what this invocation wrote goes on the "wrote" line

    print_line(
        f"training {settings.stratagem} on {adapter}: {task.describe()}; "
        f"epochs {settings.epochs}, batch size {settings.batch_size}, lr {settings.lr:g}, seed {settings.seed}"
        + (f", resuming at epoch {start_epoch}" if saved is not None else "")
    )
    if parallel is not None:
        parallel.attach(task.model, settings.batch_size, adapter, print_line)
    if start_epoch > settings.epochs:
        print_line(f"{checkpoint_path} is already at epoch {start_epoch - 1} of {settings.epochs}; nothing to train")
        if history and writes:
            # A crash after the checkpoint but before the files below leaves them an epoch
            # behind (or absent): rebuild them from the checkpoint, with its own settings.
            written = _write_outputs(task, out, settings.stratagem, settings.seed, saved[1]["settings"],
                                     history, curve)

    n_train = len(task.train_data)
    steps_per_epoch = math.ceil(n_train / settings.batch_size) if parallel is None else parallel.steps(n_train)
    # Step i of epoch e is global step (e - 1) * steps_per_epoch + i + 1; a resumed run hides what
    # a crashed run logged after its last checkpoint (purge_step).
    board = _open_tensorboard(settings, (start_epoch - 1) * steps_per_epoch + 1) \
        if writes and start_epoch <= settings.epochs else None
    started = time.perf_counter()
    # Data-parallel steps are captured too (their bucket exchanges are host calls and gates of
    # the replay), except while --balance times each rank's eager work.
    # 16-mixed: the forward under float16 autocast and a GradScaler, captured as well (the
    # scaler's state and decisions stay on the GPU; see _compiled_step).
    compiled = _compiled_step(task, scaler, mixed) if parallel is None or not parallel.balance else None
    for epoch in range(start_epoch, settings.epochs + 1):
        epoch_started = time.perf_counter()
        task.model.train()
        losses: list[float] = []
        counts: list[int] = []
        steps = math.ceil(n_train / settings.batch_size) if parallel is None else parallel.steps(n_train)
        bar = _progress_bar(n_train, f"epoch {epoch}/{settings.epochs}", settings.progress)
        try:
            if parallel is None:
                batch_iter = batches(task.train_data, settings.batch_size, shuffle=True,
                                     seed=settings.seed, epoch=epoch - 1)
            else:
                batch_iter = parallel.batches(task.train_data, seed=settings.seed, epoch=epoch - 1)
            unread = None  # (pending read of a step's loss, step, batch size)

            def take(unread) -> None:
                pending, step, size, lr = unread
                value = float(pending.result()[0])
                if not math.isfinite(value):
                    raise ValueError(
                        f"train {settings.stratagem}: the loss became {value} at epoch {epoch}, step {step + 1}; "
                        f"try a smaller --lr than {settings.lr:g}"
                    )
                losses.append(value)
                counts.append(size)
                curve.append([epoch - 1 + (step + 1) / steps, value])
                bar.update(size)
                bar.set_postfix(loss=f"{value:.4f}", refresh=False)
                if board is not None:
                    global_step = (epoch - 1) * steps + step + 1
                    board.add_scalar("train/loss", value, global_step)
                    board.add_scalar("train/lr", lr, global_step)

            for step, (x, y) in enumerate(batch_iter):
                rng = np.random.default_rng([settings.seed, epoch, step, *([parallel.rank] if parallel else [])])
                if compiled is not None:
                    loss = compiled(*task.inputs(x, y, rng))
                else:
                    with _precision_region(mixed, task.model):
                        loss = task.loss(x, y, rng)
                    _backward_and_step(task, scaler, loss,
                                       None if parallel is None else functools.partial(parallel.sync, len(x)))
                if task.scheduler is not None and task.scheduler_per_step:
                    task.scheduler.step()
                # The loss is read once the next step is recorded: the GPU never waits on the host.
                reading = (loss._buf._dev.read_later(loss._buf), step, len(x),
                           float(task.optimizer.param_groups[0]["lr"]))
                if unread is not None:
                    take(unread)
                unread = reading
            if unread is not None:
                take(unread)
        finally:
            bar.close()
        train_seconds = time.perf_counter() - epoch_started
        if parallel is not None:  # the whole global batch's loss at each step, for the curve and record
            losses = parallel.global_losses(losses, counts)
            for point, value in zip(curve[len(curve) - len(losses):], losses):
                point[1] = value
        if task.scheduler is not None and not task.scheduler_per_step:
            task.scheduler.step()

        task.model.eval()
        with ag.no_grad():
            evaluation = task.evaluate() if writes else {}
            extra = task.end_epoch(out, epoch, last=epoch == settings.epochs) if writes else {}
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
            # steps of all epochs so far run as replays of a captured step (anygpu.compile)
            "replayed_steps": compiled.stats["replayed"] if compiled is not None else 0,
            **(parallel.record() if parallel is not None else {}),
            **extra,
        }
        history.append(record)
        if board is not None:
            _log_epoch(board, record, epoch * steps_per_epoch)
        if writes:
            _save_checkpoint(task, settings, epoch, history, curve, checkpoint_path, scaler)
            written = [CHECKPOINT, *_write_outputs(task, out, settings.stratagem, settings.seed, settings.to_json(),
                                                   history, curve), *task.extra_files]
        if parallel is not None:
            parallel.end_epoch()
        print_line(_format_record(record, settings.epochs))

    if board is not None:
        board.close()
    if not history:
        raise ValueError(f"train {settings.stratagem}: no epoch was trained (--epochs {settings.epochs})")
    final = history[-1]
    print_line("wrote " + ", ".join(str(out / name) for name in written))
    if written and LOSS_PLOT not in written:
        print_line(NO_PLOT)
    print_line(f"{task.result(final)} on {adapter} in {final['seconds']:.1f} s")
    return final
