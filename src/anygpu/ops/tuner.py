"""A generic autotuner: one mechanism for every op that has several kernels to pick from.

A `Tunable` names an op and says, for a problem (a tuple that includes the dtype):
its shape bucket, its candidates (the fallback, today's heuristic pick, always first),
how to make random inputs, how to run one candidate, and a float64 NumPy reference.
`choose(dev, tunable, problem)` returns the candidate to use: from a per-device memo,
else from the disk cache, else by tuning when the problem is large enough to matter,
else the fallback.

Tuning (`tune`) checks every candidate twice before timing counts: on a small problem
against the float64 reference (memoised per device and candidate), and at full size
against the fallback's output. A candidate that fails to compile, to run or to match
is skipped; the fallback always runs, so tuning never makes results wrong.

The cache is `tuner.json` beside the matmul tuner's file (ops/autotune.py: same folder,
same ANYGPU_AUTOTUNE / ANYGPU_CACHE_DIR switches), keyed by op, op version, adapter,
driver and bucket. Entries that do not parse, or name a candidate the op no longer
offers, are ignored (and dropped at the next write); a damaged file reads as empty.
"""

from __future__ import annotations

import math
import os
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..runtime import GpuError
from ..runtime.capture import paused
from . import autotune
from .cache_file import read_entries, write_entries

CACHE_FILE = "tuner.json"
CACHE_FORMAT = 1


def pow2(x: int) -> int:
    """x rounded to the nearest power of two (for shape buckets)."""
    return 1 << round(math.log2(max(int(x), 1)))


class Tunable:
    """One tunable op. Subclasses fill in the methods below; see the module docstring."""

    name = "op"
    version = 1
    tune_from = {"gpu": 1 << 24, "cpu": 1 << 62}  # work below which the fallback is used untuned
    rtol = 1e-4  # allowed error of the float64 check, relative to the largest reference value

    def bucket(self, problem) -> str:
        raise NotImplementedError

    def work(self, problem) -> float:
        raise NotImplementedError

    def candidates(self, dev, problem) -> list:
        """Candidates for this problem on this device, the fallback first."""
        raise NotImplementedError

    def label(self, candidate) -> str:
        raise NotImplementedError

    def parse(self, label: str):
        raise NotImplementedError

    def inputs(self, problem, rng) -> list[np.ndarray]:
        """Random host inputs of `problem` (float32)."""
        raise NotImplementedError

    def run(self, dev, candidate, problem, buffers):
        """Launch the op with `candidate` on input Buffers; return the output Buffer."""
        raise NotImplementedError

    def reference(self, problem, arrays: list[np.ndarray]) -> np.ndarray:
        """The op in float64 NumPy on host inputs (flat result)."""
        raise NotImplementedError

    def small(self, problem):
        """A problem small enough for `reference` that runs the same code as `problem`."""
        raise NotImplementedError


# ---------------------------------------------------------------------------- state


@dataclass
class _State:
    chosen: dict = field(default_factory=dict)    # (op, problem, switches) -> candidate
    verified: dict = field(default_factory=dict)  # (op, label, small problem) -> passed
    broken: dict = field(default_factory=dict)    # (op, label) -> why it cannot run here


_STATES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _state(dev) -> _State:
    state = _STATES.get(dev)
    if state is None:
        state = _STATES[dev] = _State()
    return state


def _kind(dev) -> str:
    return "cpu" if getattr(dev, "adapter_type", "") == "CPU" else "gpu"


def cache_path() -> Path:
    return autotune.cache_dir() / CACHE_FILE


def cache_key(dev, tunable: Tunable, problem) -> str:
    return f"{tunable.name} v{tunable.version} | {dev.adapter_name} | {dev.driver} | {tunable.bucket(problem)}"


def choose(dev, tunable: Tunable, problem):
    """The candidate to run `problem` with (memoised per device and exact problem)."""
    state = _state(dev)
    env = os.environ
    memo = (tunable.name, problem, env.get("ANYGPU_AUTOTUNE"), env.get("ANYGPU_CACHE_DIR"), env.get("XDG_CACHE_HOME"))
    if memo in state.chosen:
        return state.chosen[memo]
    choice = _decide(dev, tunable, problem)
    state.chosen[memo] = choice
    return choice


def forget_choices(dev) -> None:
    """Drop the device's memoised choices (after the cache file changed)."""
    _state(dev).chosen.clear()


def _usable(dev, tunable: Tunable, problem) -> list:
    broken = _state(dev).broken
    found = tunable.candidates(dev, problem)
    return [found[0]] + [c for c in found[1:] if (tunable.name, tunable.label(c)) not in broken]


def _decide(dev, tunable: Tunable, problem):
    usable = _usable(dev, tunable, problem)
    fallback = usable[0]
    if not autotune.enabled() or len(usable) == 1:
        return fallback
    entry = load_cache().get(cache_key(dev, tunable, problem))
    if isinstance(entry, dict) and isinstance(entry.get("choice"), str):
        by_label = {tunable.label(c): c for c in usable}
        if entry["choice"] in by_label:
            return by_label[entry["choice"]]
    if tunable.work(problem) < tunable.tune_from[_kind(dev)]:
        return fallback
    try:
        with paused(dev):  # not part of a step being captured (runtime/capture.py)
            result = tune(dev, tunable, problem)
    except GpuError:  # e.g. no memory for the random inputs: do without tuning
        return fallback
    store(dev, tunable, problem, result)
    return result.choice


# ---------------------------------------------------------------------------- tuning


@dataclass
class TuneResult:
    choice: object
    seconds: float
    timings: dict = field(default_factory=dict)  # label -> seconds per run, or why skipped


def verify_small(dev, tunable: Tunable, candidate, problem) -> bool:
    """Run `candidate` on the small problem and compare with the float64 reference."""
    small = tunable.small(problem)
    key = (tunable.name, tunable.label(candidate), small)
    state = _state(dev)
    if key not in state.verified:
        arrays = tunable.inputs(small, np.random.default_rng(7))
        out = tunable.run(dev, candidate, small, [dev.upload(a) for a in arrays])
        got = dev.read(out).astype(np.float64)
        want = tunable.reference(small, arrays).reshape(-1)
        scale = np.abs(want).max() + 1e-30
        state.verified[key] = bool(got.shape == want.shape and np.isfinite(got).all()
                                   and np.abs(got - want).max() <= tunable.rtol * scale)
    return state.verified[key]


def tune(dev, tunable: Tunable, problem, candidates=None, rounds: int | None = None) -> TuneResult:
    """Time the candidates (default: all usable, fallback first) on random inputs of
    `problem` and return the fastest whose results are right. Waits for the GPU."""
    cpu = _kind(dev) == "cpu"
    rounds = rounds if rounds is not None else (1 if cpu else 3)
    budget_s = 0.05 if cpu else 0.02
    candidates = list(candidates) if candidates is not None else _usable(dev, tunable, problem)
    buffers = [dev.upload(a) for a in tunable.inputs(problem, np.random.default_rng(0))]
    timings: dict = {}
    best = None
    expected = None
    for index, candidate in enumerate(candidates):
        name = tunable.label(candidate)
        try:
            if not verify_small(dev, tunable, candidate, problem):
                if index == 0:
                    raise GpuError(f"{tunable.name}: the fallback {name} fails its float64 check")
                timings[name] = "wrong result on the small float64 check"
                continue
            outputs = []

            def run(candidate=candidate):
                outputs[:] = [tunable.run(dev, candidate, problem, buffers)]
            seconds = autotune.time_candidate(dev, run, None if best is None else best[0], budget_s, rounds, "one run")
            if isinstance(seconds, str):
                timings[name] = seconds
                continue
            got = dev.read(outputs[0])
        except GpuError as exc:
            if index == 0:
                raise
            _state(dev).broken[(tunable.name, name)] = str(exc)
            timings[name] = f"failed: {' '.join(str(exc).split())[:200]}"
            continue
        if expected is None:
            expected = got.astype(np.float64)
        elif not autotune.agrees(got, expected):
            timings[name] = "wrong result at full size"
            continue
        timings[name] = seconds
        if best is None or seconds < best[0]:
            best = (seconds, candidate)
    return TuneResult(best[1], best[0], timings)


# ---------------------------------------------------------------------------- disk cache


def load_cache(path: Path | None = None) -> dict:
    """The cache's valid entries (key -> {"choice": label, ...}); {} for a missing or
    damaged file. Entries of the wrong shape are left out, never an error."""
    path = path or cache_path()
    # read_entries refuses a FIFO (read_text would block) and deep "[[[..." JSON (RecursionError).
    return {key: entry for key, entry in read_entries(path, CACHE_FORMAT).items()
            if isinstance(key, str) and isinstance(entry, dict) and isinstance(entry.get("choice"), str)}


def store(dev, tunable: Tunable, problem, result: TuneResult, path: Path | None = None) -> bool:
    """Merge one result into the cache file, written atomically; False when the folder
    is not writable (the result then lives in this process's memo only)."""
    path = path or cache_path()
    entries = dict(load_cache(path))
    work = tunable.work(problem)
    entries[cache_key(dev, tunable, problem)] = {
        "choice": tunable.label(result.choice),
        "seconds": result.seconds,
        "work_per_second": work / result.seconds if result.seconds > 0 else None,
        "problem": repr(problem),
        "tuned": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    return write_entries(path, CACHE_FORMAT, entries)
