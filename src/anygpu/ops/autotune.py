"""Per-device autotuning of the matmul family (ops/matmul_gen.py).

Products are sorted into shape buckets: m, n and k each rounded to a power of two,
the transpositions, whether every contiguous axis allows vec4 access, batch > 1.
The first product of a bucket large enough to matter times a few candidate
configs on random data of its shape and keeps the fastest one that computes the
right numbers: a small random product of the same code variant against NumPy in
float64, and the first and last rows of the full-size product against the simple
kernel. Winners are kept in a JSON file in the user's cache folder, keyed by
adapter, driver, family version and bucket, so each machine tunes once.

Environment:
- ANYGPU_AUTOTUNE=0: never tune and never read the cache; a size heuristic picks.
- ANYGPU_CACHE_DIR: the cache folder (default $XDG_CACHE_HOME/anygpu, else ~/.cache/anygpu).

Tuning never makes results wrong: a candidate that fails to compile or to match
is skipped, and the simple kernel is always among the candidates.
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
from .matmul_gen import FAMILY_VERSION, MatmulConfig, Problem, Variant, launch

CACHE_FILE = "matmul_autotune.json"
CACHE_FORMAT = 1
SIMPLE = "simple"  # how the fallback kernel (config None) is named in the cache

_parse = MatmulConfig.parse

# Candidates on GPUs: the members that led at some size in benchmarks/matmul_sweep.py on
# an H200 (2026-11-29, see benchmarks/results.md): 128-wide tiles with 8x8 or 8x16
# outputs per thread and register prefetch for large products (40 TFLOP/s, 0.79 of
# cuBLAS fp32), 64-wide double-buffered tiles around 1024, 32x32 tiles below 512.
GPU_CANDIDATES = tuple(_parse(name) for name in (
    "128x128x16_8x8_v4p", "128x256x8_8x16_v4p", "128x128x8_8x16_v4p", "256x128x8_16x8_v4p",
    "128x64x16_8x8_v4p", "128x128x8_8x8_v4p", "64x128x16_8x8_v4d", "64x64x16_8x8_v4d",
    "64x64x16_8x8_v4p", "32x32x16_4x4_v4",
))
# CPU adapters (lavapipe): few candidates, since each compiles slowly and runs slowly.
CPU_CANDIDATES = tuple(_parse(name) for name in (
    "128x128x8_8x16_v4p", "128x128x8_8x8_v4p", "64x64x8_8x8_v4p",
))

# Products below these flop counts take the simple kernel (one pipeline for every
# shape, so no compile per shape variant) or are not worth tuning.
SIMPLE_BELOW = {"gpu": 1 << 20, "cpu": 1 << 24}
TUNE_FROM = {"gpu": 1 << 22, "cpu": 1 << 27}


def _kind(dev) -> str:
    return "cpu" if getattr(dev, "adapter_type", "") == "CPU" else "gpu"


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


def cache_path() -> Path:
    return cache_dir() / CACHE_FILE


def bucket(problem: Problem) -> str:
    """The shape bucket of a product, e.g. 'm1024-n1024-k512-NT-vec4-single'."""
    def pow2(x: int) -> int:
        return 1 << round(math.log2(x))
    aligned = ((problem.m if problem.trans_a else problem.k) % 4 == 0
               and (problem.k if problem.trans_b else problem.n) % 4 == 0 and problem.n % 4 == 0)
    return (f"m{pow2(problem.m)}-n{pow2(problem.n)}-k{pow2(problem.k)}-"
            f"{'T' if problem.trans_a else 'N'}{'T' if problem.trans_b else 'N'}-"
            f"{'vec4' if aligned else 'scalar'}-{'batched' if problem.batch > 1 else 'single'}")


def cache_key(dev, problem: Problem) -> str:
    return f"{dev.adapter_name} | {dev.driver} | family v{FAMILY_VERSION} | {bucket(problem)}"


def fits(dev, config: MatmulConfig | None) -> bool:
    """Whether the device's limits allow `config` (the simple kernel always fits)."""
    if config is None:
        return True
    limits = dev.limits
    return (not config.problems(limits.get("max-compute-invocations-per-workgroup", 256),
                                dev.max_workgroup_storage)
            and config.threads_x <= limits.get("max-compute-workgroup-size-x", 256)
            and config.threads_y <= limits.get("max-compute-workgroup-size-y", 256))


def heuristic(dev, problem: Problem) -> MatmulConfig | None:
    """A config chosen from the size alone (no timing). On GPUs it follows what the H200
    sweep measured: enough 128x128 tiles to fill the machine twice over take 128-wide
    tiles (128x64 when k is short), about a wave takes 64x64, fewer take 32x32."""
    kind = _kind(dev)
    if problem.flops < SIMPLE_BELOW[kind]:
        return None
    tiles = problem.batch * -(-problem.m // 128) * -(-problem.n // 128)
    if kind == "cpu":
        choice = "128x128x8_8x16_v4p" if tiles >= 4 else "64x64x8_8x8_v4p"
    elif tiles >= 256:
        choice = "128x128x16_8x8_v4p" if problem.k >= 512 else "128x64x16_8x8_v4p"
    elif tiles >= 32:
        choice = "64x64x16_8x8_v4d"
    else:
        choice = "32x32x16_4x4_v4"
    config = _parse(choice)
    if not fits(dev, config):   # a small device: the largest tile family member that fits
        config = _parse("64x64x16_8x8_v4p")
    return config if fits(dev, config) else None


def candidates(dev, problem: Problem) -> list[MatmulConfig | None]:
    """What `tune` times for this product: the simple kernel, then the family members
    that fit the device and whose tile is not far larger than the product."""
    pool = CPU_CANDIDATES if _kind(dev) == "cpu" else GPU_CANDIDATES
    chosen: list[MatmulConfig | None] = [None]
    for config in pool:
        if not fits(dev, config) or _state(dev).broken.get(config):
            continue
        if config.tile_m > 2 * problem.m or config.tile_n > 2 * problem.n:
            continue
        chosen.append(config)
    return chosen


# ---------------------------------------------------------------------------- state


@dataclass
class _DeviceState:
    chosen: dict = field(default_factory=dict)     # (environment, shape) -> config
    verified: dict = field(default_factory=dict)   # (config, variant) -> passed the small check
    broken: dict = field(default_factory=dict)     # config -> why it cannot run here


_STATES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_UNSET = object()


def _state(dev) -> _DeviceState:
    state = _STATES.get(dev)
    if state is None:
        state = _STATES[dev] = _DeviceState()
    return state


def choose(dev, problem: Problem) -> MatmulConfig | None:
    """The config to run `problem` with on `dev` (None: the simple kernel).

    Memoised per device and bucket; may tune (and so wait for the GPU) on the first
    product of a bucket."""
    state = _state(dev)
    env = os.environ
    # Keyed by the exact shape (a dict hit per product) and by what decides the choice.
    memo_key = (env.get("ANYGPU_AUTOTUNE"), env.get("ANYGPU_CACHE_DIR"), env.get("XDG_CACHE_HOME"),
                problem[:8])
    config = state.chosen.get(memo_key, _UNSET)
    if config is _UNSET:
        config = _decide(dev, problem, enabled())
        state.chosen[memo_key] = config
    return config


def forget(dev, config: MatmulConfig, reason: str) -> None:
    """Mark `config` unusable on `dev` (it failed to compile or run) and drop its choices."""
    state = _state(dev)
    state.broken[config] = reason
    for key in [k for k, v in state.chosen.items() if v == config]:
        del state.chosen[key]


def forget_choices(dev) -> None:
    """Drop the device's memoised choices (after the cache file changed)."""
    _state(dev).chosen.clear()


def _decide(dev, problem: Problem, on: bool) -> MatmulConfig | None:
    guess = heuristic(dev, problem)
    if guess is not None and _state(dev).broken.get(guess):
        guess = None
    if not on:
        return guess
    entry = load_cache().get(cache_key(dev, problem))
    if isinstance(entry, dict):
        try:
            config = _cached_config(entry)
            usable = fits(dev, config) and not (config and _state(dev).broken.get(config))
            # A file can name a config that builds but computes wrong numbers here: check it
            # once per variant, as tuning does, before trusting it.
            usable = usable and (config is None or verify_small(dev, config, problem))
        except (ValueError, TypeError, ArithmeticError, GpuError):
            usable = False   # a damaged entry: tune again
        if usable:
            return config
    if problem.flops < TUNE_FROM[_kind(dev)]:
        return guess
    try:
        with paused(dev):  # tuning is not part of a step being captured (runtime/capture.py)
            result = tune(dev, problem)
    except GpuError:  # e.g. no memory for the random operands: do without tuning
        return guess
    store(dev, problem, result)
    return result.config


# ---------------------------------------------------------------------------- timing


def time_candidate(dev, run, best_seconds: float | None, budget_s: float, rounds: int, what: str) -> float | str:
    """A tuning candidate's seconds per call of `run` (compiled and warmed up first, as many
    repeats as fit in budget_s), or why it was dropped: one call took over ten times the best
    so far (not worth more time). GpuError passes through."""
    run()
    dev.synchronize()   # compiles and warms up
    start = time.perf_counter()
    run()
    dev.synchronize()
    once = time.perf_counter() - start
    if best_seconds is not None and once > max(10 * best_seconds, 0.01):
        return f"slow: {once:.3g} s for {what}"
    repeats = max(1, min(50, int(budget_s / max(once, 1e-6))))
    return seconds_per_run(dev, run, repeats=repeats, rounds=rounds)


def agrees(got, expected) -> bool:
    """A candidate's full-size result matches the first one's: finite, and within 1e-3 of
    the largest magnitude."""
    return bool(np.isfinite(got).all()
                and np.abs(got - expected).max() <= 1e-3 * (np.abs(expected).max() + 1e-30))


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


# ---------------------------------------------------------------------------- tuning


@dataclass
class TuneResult:
    """The winner of one tuning and what every candidate did (seconds or why skipped)."""

    config: MatmulConfig | None
    seconds: float
    problem: Problem
    timings: dict = field(default_factory=dict)   # config name -> seconds per product, or a reason

    @property
    def name(self) -> str:
        return self.config.name if self.config else SIMPLE


def _random(rng, n: int) -> np.ndarray:
    return rng.random(n, dtype=np.float32) - np.float32(0.5)


def _small_problem(config: MatmulConfig, problem: Problem) -> Problem:
    """A product small enough for NumPy that generates the same code as `problem`:
    each size keeps its remainder modulo the tile (so the same bounds checks) and
    modulo 4 (so the same vec4 choices), and k spans at least two k steps."""
    def shrink(size: int, tile: int, steps: int) -> int:
        return size if size <= steps * tile else steps * tile + size % tile
    return Problem(min(problem.batch, 2), shrink(problem.m, config.tile_m, 1),
                   shrink(problem.n, config.tile_n, 1), shrink(problem.k, config.tile_k, 2),
                   problem.trans_a, problem.trans_b, problem.a_batch, problem.b_batch, problem.alpha)


def reference(problem: Problem, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The product in float64 with NumPy: [batch, m, n]."""
    p = problem
    a_mat = a.astype(np.float64).reshape(-1, *((p.k, p.m) if p.trans_a else (p.m, p.k)))
    b_mat = b.astype(np.float64).reshape(-1, *((p.n, p.k) if p.trans_b else (p.k, p.n)))
    if p.trans_a:
        a_mat = a_mat.transpose(0, 2, 1)
    if p.trans_b:
        b_mat = b_mat.transpose(0, 2, 1)
    return p.alpha * np.broadcast_to(a_mat @ b_mat, (p.batch, p.m, p.n))


def verify_small(dev, config: MatmulConfig, problem: Problem) -> bool:
    """Run `config` on a small random product of the same code variant as `problem`
    and compare with NumPy in float64 (memoised per device and variant)."""
    small = _small_problem(config, problem)
    variant = Variant.of(config, small.m, small.n, small.k, small.trans_a, small.trans_b)
    key = (config, variant, small.batch > 1)
    state = _state(dev)
    if key not in state.verified:
        rng = np.random.default_rng(7)
        a, b = _random(rng, small.a_len), _random(rng, small.b_len)
        out = dev.empty(small.batch * small.m * small.n)
        launch(dev, config, small, dev.upload(a), dev.upload(b), out)
        got = dev.read(out).reshape(small.batch, small.m, small.n)
        want = reference(small, a, b)
        scale = np.abs(want).max() + 1e-30
        state.verified[key] = bool(np.isfinite(got).all() and np.abs(got - want).max() <= 1e-4 * scale)
    return state.verified[key]


def _edge_rows(dev, out, problem: Problem) -> np.ndarray:
    """The first rows of the first matrix and the last rows of the last one."""
    rows = min(problem.m, 8) * problem.n
    first = dev.read(dev.copy(out, n=rows, src_offset=0))
    last = dev.read(dev.copy(out, n=rows, src_offset=problem.batch * problem.m * problem.n - rows))
    return np.concatenate([first, last])


def tune(dev, problem: Problem, configs=None, rounds: int | None = None,
         budget_s: float | None = None) -> TuneResult:
    """Time `configs` (default `candidates(dev, problem)`) on random data of this shape
    and return the fastest whose numbers are right. Waits for the GPU.

    rounds: timed rounds per candidate (median taken); budget_s: about how long one
    round may take (more repeats for fast products)."""
    cpu = _kind(dev) == "cpu"
    rounds = rounds if rounds is not None else (1 if cpu else 3)
    budget_s = budget_s if budget_s is not None else (0.05 if cpu else 0.02)
    configs = list(configs) if configs is not None else candidates(dev, problem)
    if None not in configs:
        configs.insert(0, None)   # the reference the others are checked against
    else:
        configs.insert(0, configs.pop(configs.index(None)))
    rng = np.random.default_rng(0)
    a = dev.upload(_random(rng, problem.a_len))
    b = dev.upload(_random(rng, problem.b_len))
    out = dev.empty(problem.batch * problem.m * problem.n)
    timings: dict = {}
    best: tuple[float, MatmulConfig | None] | None = None
    expected = None
    for config in configs:
        name = config.name if config else SIMPLE
        if config is not None and not fits(dev, config):
            timings[name] = "over the device's limits"
            continue
        try:
            if config is not None and not verify_small(dev, config, problem):
                timings[name] = "wrong result on the small check"
                continue

            def run(config=config):
                launch(dev, config, problem, a, b, out)
            seconds = time_candidate(dev, run, None if best is None else best[0], budget_s, rounds, "one product")
            if isinstance(seconds, str):
                timings[name] = seconds
                continue
            got = _edge_rows(dev, out, problem)
        except GpuError as exc:
            if config is None:
                raise
            forget(dev, config, str(exc))
            timings[name] = f"failed: {' '.join(str(exc).split())[:200]}"
            continue
        if expected is None:
            expected = got
        elif not agrees(got, expected):
            timings[name] = "wrong result at full size"
            continue
        timings[name] = seconds
        if best is None or seconds < best[0]:
            best = (seconds, config)
    assert best is not None  # the simple kernel always runs
    return TuneResult(best[1], best[0], problem, timings)


# ---------------------------------------------------------------------------- disk cache


_LOADED: dict = {}   # path -> ((mtime, size, inode), entries): the file is parsed again only when it changes




def _cached_config(entry) -> MatmulConfig | None:
    """The config a cache entry names; ValueError when the entry is damaged or names a
    config that cannot be built (a zero or non-power-of-two field, bad divisibility)."""
    name = entry.get("config") if isinstance(entry, dict) else None
    if not isinstance(name, str):
        raise ValueError(f"cache entry {entry!r:.80} has no config name")
    if name == SIMPLE:
        return None
    config = _parse(name)
    if any(getattr(config, f) < 1 for f in ("tile_m", "tile_n", "tile_k", "rows", "cols")):
        raise ValueError(f"cache entry names {name!r}, which has a zero field")
    if config.problems(1 << 30, 1 << 40):  # buildable at all; the device's limits are checked by fits()
        raise ValueError(f"cache entry names {name!r}, which cannot be built: {config.problems(1 << 30, 1 << 40)}")
    return config


def load_cache(path: Path | None = None) -> dict:
    """The cache file's entries (empty when missing, unreadable or of another format).

    Any content must lead to a valid kernel: the file is read only when it is a regular
    file of sane size (a FIFO would block), and entries that do not name a buildable
    config are dropped here (they are tuned again), so one damaged entry never fails a
    matmul. (The file checks are cache_file.read_entries, shared with ops/tuner.py.)"""
    path = path or cache_path()
    try:
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        known = _LOADED.get(str(path))
        if known is not None and known[0] == stamp:
            return known[1]
    except OSError:
        return {}
    entries = {}
    for key, entry in read_entries(path, CACHE_FORMAT, stat).items():
        try:
            _cached_config(entry)
        except (ValueError, TypeError, ArithmeticError):
            continue
        entries[key] = entry
    _LOADED[str(path)] = (stamp, entries)
    return entries


def store(dev, problem: Problem, result: TuneResult, path: Path | None = None) -> bool:
    """Add a tuning result to the cache file (merged with what is there, written
    atomically: a temporary file in the same folder, fsync, rename). False when the
    folder is not writable; tuning results are then kept for this process only."""
    path = path or cache_path()
    entries = dict(load_cache(path))
    entries[cache_key(dev, problem)] = {
        "config": result.name,
        "seconds": result.seconds,
        "gflops": problem.flops / result.seconds / 1e9 if result.seconds > 0 else None,
        "shape": [problem.batch, problem.m, problem.n, problem.k],
        "tuned": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    return write_entries(path, CACHE_FORMAT, entries)
