"""The autotuner: one mechanism for every op that has several kernels to pick from
(matmul in ops/matmul_tune.py, convolutions in ops/conv_tune.py, softmax and layer norm
in ops/softmax_tune.py and ops/norm_tune.py).

A `Tunable` names an op and says, for a problem (a tuple that includes the dtype):
its shape bucket, its candidates (the fallback, always correct, first), the candidate
to use untuned (by default the fallback; matmul's is a size heuristic), how to make
random inputs, how to run one candidate, and a float64 NumPy reference.
`choose(dev, tunable, problem)` returns the candidate to use: from a per-device memo,
else from the disk cache, else by tuning when the problem is large enough to matter,
else the untuned pick.

Tuning (`tune`) checks every candidate twice before timing counts: on a small problem
against the float64 reference (memoised per device and candidate), and at full size
against the fallback's output. A candidate that fails to compile, to run or to match
is skipped; the fallback always runs, so tuning never makes results wrong.

The cache is `tuner.json` in the cache folder, keyed by op, op version, adapter, driver
and bucket. Entries that do not parse, or name a candidate the op no longer offers, are
ignored (and dropped at the next write); a damaged file reads as empty; a cached choice
other than the fallback passes the float64 check once per process before it is trusted.

Environment:
- ANYGPU_AUTOTUNE=0: never tune and never read the cache; the untuned pick is used.
- ANYGPU_CACHE_DIR: the cache folder (default $XDG_CACHE_HOME/anygpu, else ~/.cache/anygpu).
"""

from __future__ import annotations

import math
import os
import statistics
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..runtime import GpuError
from ..runtime.capture import paused
from .cache_file import read_entries, write_entries

CACHE_FILE = "tuner.json"
CACHE_FORMAT = 1


def pow2(x: int) -> int:
    """x rounded to the nearest power of two (for shape buckets)."""
    return 1 << round(math.log2(max(int(x), 1)))


def enabled() -> bool:
    """False when ANYGPU_AUTOTUNE=0 (or 'false', 'off', 'no')."""
    return os.environ.get("ANYGPU_AUTOTUNE", "1").strip().lower() not in ("0", "false", "off", "no")


def cache_dir() -> Path:
    """Where tuning results live: ANYGPU_CACHE_DIR, else $XDG_CACHE_HOME/anygpu, else ~/.cache/anygpu."""
    explicit = os.environ.get("ANYGPU_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "anygpu"


class Tunable:
    """One tunable op. Subclasses fill in the methods below; see the module docstring."""

    name = "op"
    version = 1
    tune_from = {"gpu": 1 << 24, "cpu": 1 << 62}  # work below which the untuned pick is used
    rtol = 1e-4  # allowed error of the float64 check, relative to the largest reference value

    def bucket(self, problem) -> str:
        raise NotImplementedError

    def work(self, problem) -> float:
        raise NotImplementedError

    def candidates(self, dev, problem) -> list:
        """Candidates for this problem on this device, the fallback first."""
        raise NotImplementedError

    def known(self, dev, problem) -> list:
        """Every candidate a cache entry of this problem's bucket may name: the candidates,
        unless they depend on more than the bucket (then all that the bucket's problems may offer)."""
        return self.candidates(dev, problem)

    def untuned(self, dev, problem, fallback):
        """The candidate used without tuning (tuning off, no cache entry, problem too small):
        the fallback unless the op has a better guess from the size alone."""
        return fallback

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

    def small_for(self, candidate, problem):
        """`small` for one candidate (ops whose code variant depends on the candidate too
        override this instead)."""
        return self.small(problem)

    def sample(self, dev, out, problem) -> np.ndarray:
        """What of a full-size output the candidates' results are compared on (all of it,
        unless reading it all back costs too much)."""
        return dev.read(out)


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


def adapter_kind(dev) -> str:
    """'cpu' for a software adapter (lavapipe), else 'gpu' (the keys of `tune_from`)."""
    return "cpu" if getattr(dev, "adapter_type", "") == "CPU" else "gpu"


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def cache_key(dev, tunable: Tunable, problem) -> str:
    return f"{tunable.name} v{tunable.version} | {dev.adapter_name} | {dev.driver} | {tunable.bucket(problem)}"


def choose(dev, tunable: Tunable, problem):
    """The candidate to run `problem` with (memoised per device and exact problem); may
    tune, and so wait for the GPU, on the first problem of a bucket."""
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


def forget(dev, tunable: Tunable, candidate, reason: str) -> None:
    """Mark `candidate` unusable on `dev` (it failed to compile or run) and drop the
    memoised choices that name it."""
    state = _state(dev)
    state.broken[(tunable.name, tunable.label(candidate))] = reason
    for key in [k for k, v in state.chosen.items() if k[0] == tunable.name and v == candidate]:
        del state.chosen[key]


def _usable(dev, tunable: Tunable, problem) -> list:
    broken = _state(dev).broken
    found = tunable.candidates(dev, problem)
    return [found[0]] + [c for c in found[1:] if (tunable.name, tunable.label(c)) not in broken]


def _decide(dev, tunable: Tunable, problem):
    state = _state(dev)
    usable = _usable(dev, tunable, problem)
    fallback = usable[0]
    guess = tunable.untuned(dev, problem, fallback)
    if (tunable.name, tunable.label(guess)) in state.broken:
        guess = fallback
    if not enabled():
        return guess
    entry = load_cache().get(cache_key(dev, tunable, problem))
    if entry is not None:  # a label the op does not know, or broken here, is ignored
        label = entry["choice"]
        by_label = {tunable.label(c): c for c in tunable.known(dev, problem)}
        if label in by_label and (tunable.name, label) not in state.broken:
            cached = by_label[label]
            if label == tunable.label(fallback) or _trusted(dev, tunable, cached, problem):
                return cached
    if tunable.work(problem) < tunable.tune_from[adapter_kind(dev)]:
        return guess
    if len(usable) == 1:
        return fallback
    try:
        with paused(dev):  # not part of a step being captured (runtime/capture.py)
            result = tune(dev, tunable, problem)
    except GpuError:  # e.g. no memory for the random inputs: do without tuning
        return guess
    store(dev, tunable, problem, result)
    return result.choice


def _trusted(dev, tunable: Tunable, candidate, problem) -> bool:
    """A cached choice computes the right numbers here (a file can name a candidate that
    builds but is wrong on this device): the float64 check, once per variant."""
    try:
        with paused(dev):
            return verify_small(dev, tunable, candidate, problem)
    except GpuError as exc:
        _state(dev).broken[(tunable.name, tunable.label(candidate))] = str(exc)
        return False


# ---------------------------------------------------------------------------- timing


def seconds_per_run(dev, run, repeats: int = 10, rounds: int = 3) -> float:
    """Median over `rounds` of the GPU seconds per call of `run` (which records work),
    with `repeats` calls per round after one warm-up call.

    GPU time comes from timestamp queries where the adapter has them and `run`
    records only dispatches; otherwise from a wall clock around the calls and one
    synchronize (which then includes the host's recording time)."""
    run()
    dev.synchronize()
    samples = []
    for _ in range(max(rounds, 1)):
        def record():
            for _ in range(repeats):
                run()
        seconds = dev.time_gpu(record)
        if seconds is None:
            start = time.perf_counter()
            record()
            dev.synchronize()
            seconds = time.perf_counter() - start
        samples.append(seconds / repeats)
    return statistics.median(samples)


def time_candidate(dev, run, best_seconds: float | None, budget_s: float, rounds: int) -> float | str:
    """A candidate's seconds per call of `run` (compiled and warmed up first, as many
    repeats as fit in budget_s), or why it was dropped: one call took over ten times the
    best so far (not worth more time). GpuError passes through."""
    run()
    dev.synchronize()   # compiles and warms up
    start = time.perf_counter()
    run()
    dev.synchronize()
    once = time.perf_counter() - start
    if best_seconds is not None and once > max(10 * best_seconds, 0.01):
        return f"slow: {once:.3g} s for one run"
    repeats = max(1, min(50, int(budget_s / max(once, 1e-6))))
    return seconds_per_run(dev, run, repeats=repeats, rounds=rounds)


def agrees(got, expected) -> bool:
    """A candidate's full-size result matches the fallback's: finite, and within 1e-3 of
    the largest magnitude."""
    return bool(np.isfinite(got).all()
                and np.abs(got - expected).max() <= 1e-3 * (np.abs(expected).max() + 1e-30))


# ---------------------------------------------------------------------------- tuning


@dataclass
class TuneResult:
    choice: object
    seconds: float
    timings: dict = field(default_factory=dict)  # label -> seconds per run, or why skipped


def verify_small(dev, tunable: Tunable, candidate, problem) -> bool:
    """Run `candidate` on the small problem and compare with the float64 reference."""
    small = tunable.small_for(candidate, problem)
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


def tune(dev, tunable: Tunable, problem, candidates=None, rounds: int | None = None,
         budget_s: float | None = None) -> TuneResult:
    """Time the candidates (default: all usable, fallback first) on random inputs of
    `problem` and return the fastest whose results are right. Waits for the GPU.

    rounds: timed rounds per candidate (median taken); budget_s: about how long one
    round may take (more repeats for fast problems)."""
    cpu = adapter_kind(dev) == "cpu"
    rounds = rounds if rounds is not None else (1 if cpu else 3)
    budget_s = budget_s if budget_s is not None else (0.05 if cpu else 0.02)
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
            seconds = time_candidate(dev, run, None if best is None else best[0], budget_s, rounds)
            if isinstance(seconds, str):
                timings[name] = seconds
                continue
            got = tunable.sample(dev, outputs[0], problem)
        except GpuError as exc:
            if index == 0:
                raise
            forget(dev, tunable, candidate, str(exc))
            timings[name] = f"failed: {' '.join(str(exc).split())[:200]}"
            continue
        if expected is None:
            expected = got.astype(np.float64)
        elif not agrees(got, expected):
            timings[name] = "wrong result at full size"
            continue
        timings[name] = seconds
        if best is None or seconds < best[0]:
            best = (seconds, candidate)
    assert best is not None  # the fallback always runs (or raised)
    return TuneResult(best[1], best[0], timings)


# ---------------------------------------------------------------------------- disk cache


_LOADED: dict = {}  # path -> ((mtime, size, inode), entries): the file is parsed again only when it changes


def load_cache(path: Path | None = None) -> dict:
    """The cache's valid entries (key -> {"choice": label, ...}); {} for a missing or
    damaged file. Entries of the wrong shape are left out, never an error."""
    path = path or cache_path()
    try:
        stat = path.stat()
    except OSError:
        return {}
    stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
    known = _LOADED.get(str(path))
    if known is not None and known[0] == stamp:
        return known[1]
    # read_entries refuses a FIFO (read_text would block) and deep "[[[..." JSON (RecursionError).
    entries = {key: entry for key, entry in read_entries(path, CACHE_FORMAT, stat).items()
               if isinstance(key, str) and isinstance(entry, dict) and isinstance(entry.get("choice"), str)}
    _LOADED[str(path)] = (stamp, entries)
    return entries


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
