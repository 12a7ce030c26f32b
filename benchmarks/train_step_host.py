"""Host cost of one `anygpu train digits` step, --precision 32 against 16-mixed: whether the
loop's step is replayed (anygpu.compile), dispatches per step, and the main thread's CPU
time per step (time.thread_time: on lavapipe the GPU work runs in lavapipe's own threads,
so wall-clock time would mix it in).

    python benchmarks/train_step_host.py [--epochs 2] [--eager] [--kernels]

Drives the loop's own step (train/loop.py _compiled_step, or with --eager the step it runs
under ANYGPU_COMPILE=0) over the digits stratagem's batches (batch 32, seed 0), skipping
each epoch's short last batch; prints one JSON line per precision with the median over the
last epoch's steps and the test accuracy after training. --kernels lists the replay's
dispatches."""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

import anygpu as ag
from anygpu.io.datasets import batches
from anygpu.train import loop
from anygpu.train.stratagems import build_digits


def measure(precision: str, epochs: int, eager: bool, kernels: bool) -> dict:
    mixed = precision == "16-mixed"
    settings = loop.Settings(stratagem="digits", epochs=epochs, batch_size=32, lr=4e-3, seed=0,
                             out=Path("unused"), precision=precision)
    ag.manual_seed(settings.seed)
    task = build_digits(settings)
    dev = ag.gpu()
    scaler = ag.amp.GradScaler("cuda", enabled=mixed)
    compiled = None if eager else loop._compiled_step(task, scaler, mixed)
    host, dispatches = [], []
    for epoch in range(epochs):
        host.clear()
        dispatches.clear()
        for step, (x, y) in enumerate(batches(task.train_data, settings.batch_size, shuffle=True,
                                              seed=settings.seed, epoch=epoch)):
            if len(x) != settings.batch_size:
                continue
            rng = np.random.default_rng([settings.seed, epoch + 1, step])
            before, started = dev.stats["dispatches"], time.thread_time()
            if compiled is not None:
                loss = compiled(*task.inputs(x, y, rng))
            else:
                with loop._precision_region(mixed):
                    loss = task.loss(x, y, rng)
                loop._backward_and_step(task, scaler, loss)
            pending = dev.read_later(loss._buf)
            host.append(time.thread_time() - started)
            dispatches.append(dev.stats["dispatches"] - before)
            pending.result()
        task.scheduler.step()
    task.model.eval()
    with ag.no_grad():
        accuracy = task.evaluate()["test_accuracy"]
    result = {"precision": precision, "replayed": None if compiled is None else compiled.stats["replayed"],
              "eager": None if compiled is None else compiled.stats["eager"],
              "reason": "ANYGPU_COMPILE=0 (eager)" if compiled is None else compiled.reason(),
              "dispatches_per_step": statistics.median(dispatches),
              "host_cpu_ms_per_step": round(1e3 * statistics.median(host), 3),
              "scale": scaler.get_scale(), "test_accuracy": round(accuracy, 4)}
    if kernels and compiled is not None and compiled._signatures:
        replay = next(iter(compiled._signatures.values())).replay
        if replay is not None:
            result["kernels"] = [replay._dispatch_info[cmd[3]][0].name for cmd in replay.commands
                                 if cmd[0] == "dispatch"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--eager", action="store_true", help="the loop's eager step (ANYGPU_COMPILE=0)")
    parser.add_argument("--kernels", action="store_true", help="list the replay's dispatches")
    parser.add_argument("--precision", choices=("32", "16-mixed"), action="append")
    args = parser.parse_args()
    for precision in args.precision or ["32", "16-mixed"]:
        print(json.dumps(measure(precision, args.epochs, args.eager, args.kernels)), flush=True)


if __name__ == "__main__":
    main()
