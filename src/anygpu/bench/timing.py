"""Clocks for the benchmark suite: anygpu's GPU time, NumPy's and PyTorch's, measured
the same way (warm-up, then the median of several rounds of repeated calls)."""

from __future__ import annotations

import statistics
import time

from ..ops.tuner import seconds_per_run
from ..runtime.device import MAX_PENDING


def _repeats_for(seconds_once: float, budget_s: float, most: int) -> int:
    return max(1, min(most, int(budget_s / max(seconds_once, 1e-7))))


def _rounds_for(seconds_once: float, budget_s: float, rounds: int) -> int:
    # Slow calls (NumPy at 8192, say) get fewer rounds: at least one, about 4x the budget.
    return max(1, min(rounds, int(4 * budget_s / max(seconds_once, 1e-7))))


# A first call that took longer than WARM_AFTER_S (kernels compiled, candidates tuned on the
# host) left the GPU idle long enough to drop its clocks; the rounds that follow (tens of ms
# of work) are then timed before the clocks are back up, which once read a 36 us layer norm
# at 112 us on an H200. Such rows run `run` for WARM_S first (GPU adapters only).
WARM_AFTER_S = 0.05
WARM_S = 0.3


def _keep_busy(run, sync, seconds: float) -> None:
    """Call `run` for `seconds`, with `sync()` after every 8 calls (clocks up before timing)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(8):
            run()
        sync()


def time_anygpu(dev, run, budget_s: float = 0.2, rounds: int = 5, detail: dict | None = None) -> float:
    """Median GPU seconds per call of `run` (which records anygpu work).

    Timestamp queries when the adapter has them (then host time is excluded),
    otherwise many calls and one synchronize on a wall clock. `detail`, when given,
    receives the wall-clock seconds of one call with its synchronize (a check on
    the GPU clock: it can only be longer)."""
    first = time.perf_counter()
    run()
    dev.synchronize()   # compile, tune, fill caches
    if time.perf_counter() - first > WARM_AFTER_S and getattr(dev, "adapter_type", "") != "CPU":
        _keep_busy(run, dev.synchronize, WARM_S)
    dispatches = dev.stats["dispatches"]
    start = time.perf_counter()
    run()
    dev.synchronize()
    once = time.perf_counter() - start
    per_call = max(dev.stats["dispatches"] - dispatches, 1)
    if detail is not None:
        detail["wall_s_one_call"] = once
    # A round must fit in one submit (one compute pass) for the timestamps to span it.
    repeats = _repeats_for(once, budget_s / rounds, max(1, (MAX_PENDING - 8) // per_call))
    return seconds_per_run(dev, run, repeats=repeats, rounds=rounds)


def _plan(fn, sync, budget_s: float, rounds: int) -> tuple[int, int]:
    """Warm `fn` up, time one call, and split the budget into (rounds, repeats per round)."""
    fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = time.perf_counter() - start
    rounds = _rounds_for(once, budget_s, rounds)
    return rounds, _repeats_for(once, budget_s / rounds, 1000)


def time_host(fn, sync=None, budget_s: float = 0.2, rounds: int = 5, warm_s: float = 0.0) -> float:
    """Median wall seconds per call of `fn`, calling `sync()` after each round (e.g.
    torch.cuda.synchronize) so asynchronous work is counted. warm_s: call `fn` for that
    long first (a GPU's clocks, and the host's, come up under steady work: an H200 ran the
    first 0.2 s of captured MLP steps at 842 us each, the next at 355)."""
    sync = sync or (lambda: None)
    if warm_s > 0:
        _keep_busy(fn, sync, warm_s)
    rounds, repeats = _plan(fn, sync, budget_s, rounds)
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / repeats)
    return statistics.median(samples)


def time_torch(torch, device: str, fn, budget_s: float = 0.2, rounds: int = 5) -> float:
    """Median seconds per call of `fn` (torch work on `device`): CUDA events on a
    CUDA device (GPU time, like anygpu's timestamps), a wall clock on the CPU."""
    if device != "cuda":
        return time_host(fn, budget_s=budget_s, rounds=rounds)
    sync = torch.cuda.synchronize
    rounds, repeats = _plan(fn, sync, budget_s, rounds)
    samples = []
    for _ in range(rounds):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(repeats):
            fn()
        end.record()
        end.synchronize()
        samples.append(begin.elapsed_time(end) * 1e-3 / repeats)
    return statistics.median(samples)
