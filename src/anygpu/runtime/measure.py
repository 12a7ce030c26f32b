"""Routing by measurement: time each adapter on a small fixed suite, cache the result per
adapter and driver, and pick the fastest (``ANYGPU_ADAPTER=fastest``, ``anygpu info --measure``).

The suite (kernels/measure.wgsl), each part timed by wall clock around a synchronize,
best of ``REPEATS``:

- ``matmul``: one MATMUL_SIZE^3 float32 matmul by a plain one-output-per-invocation kernel (the same on
  every adapter, not the tuned family), checked against NumPy: an adapter that computes
  wrong numbers is reported and never chosen.
- ``bandwidth``: a GPU-side copy of COPY_BYTES.
- ``dispatch``: DISPATCHES dispatches of an empty kernel, one submit.

An adapter's score is the suite's time, the sum of the three parts' seconds: lower is
faster. Results are cached in ``adapters.json`` in the cache folder (ANYGPU_CACHE_DIR,
else $XDG_CACHE_HOME/anygpu, else ~/.cache/anygpu: the autotuner's folder), keyed by
adapter name, backend, type, driver and PCI ids, and by SUITE_VERSION.

Each adapter is measured in a child process of its own (``python -m anygpu.runtime.measure
INDEX KEY``, IN_CHILD): a driver that aborts, hangs or leaves threads behind (an OpenGL
adapter's driver, torn down from a garbage-collecting thread, once took a test process down
with it) costs that adapter a row saying "unusable", never the caller's process, which opens
no adapter but its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .. import bounded_json
from .device import Device, adapter_infos, AdapterInfo
from .errors import GpuError
from .shaders import load_shader

__all__ = ["Measurement", "measure_adapter", "measure_in_child", "measure_all", "cached", "fastest", "table", "cache_path", "adapter_key",
           "SUITE_VERSION"]

SUITE_VERSION = 1  # bump when the suite changes: older cached numbers are then ignored
MATMUL_SIZE = 128  # small: a software driver must finish the suite in seconds
COPY_BYTES = 32 << 20
DISPATCHES = 200
REPEATS = 3
CACHE_FILE = "adapters.json"
MAX_CACHE_BYTES = 1 << 20  # one small entry per adapter and driver; anything larger is not ours
IN_CHILD = True  # measure each adapter in a child process (tests that fake a Device set False)
CHILD_TIMEOUT = 300.0  # seconds; a software driver runs the suite in a few


@dataclass
class Measurement:
    """One adapter's suite results. Seconds are the best of REPEATS runs of each part."""

    key: str
    name: str
    backend: str
    type: str
    driver: str
    matmul_seconds: float
    copy_seconds: float
    dispatch_seconds: float
    correct: bool
    measured_at: str
    suite_version: int = SUITE_VERSION

    @property
    def suite_seconds(self) -> float:
        return self.matmul_seconds + self.copy_seconds + self.dispatch_seconds

    @property
    def matmul_gflops(self) -> float:
        return 2.0 * MATMUL_SIZE ** 3 / self.matmul_seconds / 1e9

    @property
    def bandwidth_gbs(self) -> float:
        return 2.0 * COPY_BYTES / self.copy_seconds / 1e9  # read + write

    @property
    def dispatch_us(self) -> float:
        return self.dispatch_seconds / DISPATCHES * 1e6


def cache_path() -> Path:
    """adapters.json in ANYGPU_CACHE_DIR, else $XDG_CACHE_HOME/anygpu, else ~/.cache/anygpu
    (the same folder as the autotuner's cache, ops/tuner.py, which runtime cannot import)."""
    folder = os.environ.get("ANYGPU_CACHE_DIR")
    if not folder:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        folder = os.path.join(base, "anygpu")
    return Path(folder) / CACHE_FILE


def adapter_key(info: AdapterInfo) -> str:
    """Adapter and driver: a new driver version is a new key, so it is measured again."""
    return f"{info.name}|{info.backend}|{info.type}|{info.driver}|{info.vendor_id:04x}:{info.device_id:04x}"


def _best_of(run, dev: Device) -> float:
    run()  # warm-up: pipeline creation, first-touch allocation
    dev.synchronize()
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        run()
        dev.synchronize()
        best = min(best, time.perf_counter() - started)
    return best


def measure_adapter(info: AdapterInfo) -> Measurement:
    """Open the adapter (by index) and run the suite on it."""
    dev = Device(adapter=str(info.index))
    source = load_shader("measure.wgsl")
    matmul = dev.kernel("measure_matmul", source, 2, 1, "IIII", entry_point="matmul")
    touch = dev.kernel("measure_touch", source, 2, 1, "IIII", entry_point="touch")
    size = MATMUL_SIZE
    rng = np.random.default_rng(0)
    a_host = rng.standard_normal((size, size), dtype=np.float32)
    b_host = rng.standard_normal((size, size), dtype=np.float32)
    a, b, c = dev.upload(a_host.ravel()), dev.upload(b_host.ravel()), dev.empty(size * size)
    tiles = -(-size // 8)

    matmul_seconds = _best_of(lambda: dev.launch(matmul, [a, b], [c], (size, size, size, 0), (tiles, tiles, 1)), dev)
    expected = a_host.astype(np.float64) @ b_host.astype(np.float64)
    got = dev.read(c).reshape(size, size)
    correct = bool(np.allclose(got, expected, rtol=1e-3, atol=1e-2 * np.sqrt(size)))

    source_buf = dev.alloc(COPY_BYTES // 4)
    target_buf = dev.empty(COPY_BYTES // 4)
    copy_seconds = _best_of(lambda: dev.copy(source_buf, target_buf), dev)

    counter = dev.alloc(1)
    small = dev.alloc(1)

    def dispatches():
        for _ in range(DISPATCHES):
            dev.launch(touch, [small, small], [counter], (0, 0, 0, 0), (1, 1, 1))

    dispatch_seconds = _best_of(dispatches, dev)
    return Measurement(
        key=adapter_key(info), name=info.name, backend=info.backend, type=info.type, driver=info.driver,
        matmul_seconds=matmul_seconds, copy_seconds=copy_seconds, dispatch_seconds=dispatch_seconds,
        correct=correct, measured_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


def _child_command(info: AdapterInfo) -> list[str]:
    return [sys.executable, "-m", "anygpu.runtime.measure", str(info.index), adapter_key(info)]


def measure_in_child(info: AdapterInfo, timeout: float = CHILD_TIMEOUT) -> Measurement:
    """measure_adapter(info) in a child process: its Measurement, or RuntimeError saying how the
    child failed (the suite's own error, a signal, a timeout). The child checks that its adapter
    at info.index is the same adapter (by adapter_key) before measuring it."""
    env = dict(os.environ, ANYGPU_ADAPTER=str(info.index))  # never "fastest" again in the child
    try:
        done = subprocess.run(_child_command(info), env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the suite did not finish in {timeout:.0f} s") from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else None
    except ValueError:
        answer = None
    if done.returncode == 0 and isinstance(answer, dict):
        if "unusable" in answer:
            raise RuntimeError(str(answer["unusable"]))
        measurement = _from_entry(answer)
        if measurement is not None:
            return measurement
    if done.returncode < 0:
        try:
            how = f"the measuring process died of {signal.Signals(-done.returncode).name}"
        except ValueError:
            how = f"the measuring process died of signal {-done.returncode}"
    else:
        how = f"the measuring process exited with {done.returncode}"
    last = [line for line in done.stderr.splitlines() if line.strip()]
    raise RuntimeError(how + (f": {last[-1].strip()}" if last else ""))


def _child_main(argv: list[str]) -> int:
    """`python -m anygpu.runtime.measure INDEX KEY`: measure adapter INDEX, print one JSON line
    (the Measurement, or {"unusable": why})."""
    index, key = int(argv[0]), argv[1]
    try:
        infos = adapter_infos()
        info = next((i for i in infos if i.index == index), None)
        if info is None or adapter_key(info) != key:
            raise RuntimeError(f"adapter [{index}] is not {key!r} in this process")
        answer: dict = asdict(measure_adapter(info))
    except Exception as error:  # noqa: BLE001 -- reported to the parent, which marks it unusable
        answer = {"unusable": _short_reason(error)}
    print(json.dumps(answer), flush=True)
    return 0


def _load_cache() -> dict[str, dict]:
    path = cache_path()
    try:  # bounded: a FIFO, a huge file or "[[[[..." is refused before json reads it
        entries = bounded_json.read_file(path, max_bytes=MAX_CACHE_BYTES)
    except (OSError, ValueError):  # no cache yet, or a damaged one: measure again
        return {}
    return entries if isinstance(entries, dict) else {}


def _from_entry(entry) -> Measurement | None:
    """A cached entry, or None when it is from another suite version or malformed."""
    if not isinstance(entry, dict) or entry.get("suite_version") != SUITE_VERSION:
        return None
    try:
        measurement = Measurement(**entry)
    except TypeError:
        return None
    numbers = (measurement.matmul_seconds, measurement.copy_seconds, measurement.dispatch_seconds)
    if not all(isinstance(v, (int, float)) and 0 < v < float("inf") for v in numbers):
        return None
    return measurement


def cached(info: AdapterInfo) -> Measurement | None:
    """The cached measurement of this adapter and driver, if any."""
    return _from_entry(_load_cache().get(adapter_key(info)))


def _store(measurements: list[Measurement]) -> None:
    path = cache_path()
    entries = _load_cache()
    for measurement in measurements:
        entries[measurement.key] = asdict(measurement)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    os.replace(temporary, path)  # readers see the old file or the new one, never half of one


def _short_reason(error: BaseException, width: int = 120) -> str:
    """One line: the exception's first and last lines of text (wgpu puts the cause last),
    its type when it has no text, cut to `width` characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        text = type(error).__name__
    else:
        text = lines[0] if len(lines) == 1 else f"{lines[0].rstrip(':')}: {lines[-1]}"
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def measure_all(infos: list[AdapterInfo] | None = None,
                use_cache: bool = False) -> list[tuple[AdapterInfo, Measurement | None, str]]:
    """(adapter, measurement or None, how) for each adapter; how is "measured", "cached" or
    "unusable: <why>" (the adapter failed somewhere: device request, pipeline, dispatch,
    read-back). New measurements are written to the cache; failures are not."""
    infos = adapter_infos() if infos is None else infos
    results, fresh = [], []
    for info in infos:
        measurement = cached(info) if use_cache else None
        if measurement is not None:
            results.append((info, measurement, "cached"))
            continue
        try:
            measurement = measure_in_child(info) if IN_CHILD else measure_adapter(info)
        except Exception as error:  # noqa: BLE001 -- see below
            # An adapter may fail at any point: wgpu raises RuntimeError, not GPUError, for
            # some (on an H200 host the OpenGL adapter's device request fails with "Parent
            # device is lost" after its internal compute pipeline is refused: GL 3.3 has no
            # compute shaders). Whatever the failure, the adapter is reported unusable and
            # never chosen; the suite runs in a child process (or, IN_CHILD False, on a Device
            # of its own), so the process's main device is untouched. KeyboardInterrupt/SystemExit are not Exceptions: they pass.
            results.append((info, None, f"unusable: {_short_reason(error)}"))
            continue
        fresh.append(measurement)
        results.append((info, measurement, "measured"))
    if fresh:
        try:
            _store(fresh)
        except OSError:  # a read-only home still gets its answer, only not remembered
            pass
    return results


def fastest(backend: str | None = None) -> tuple[AdapterInfo, str]:
    """The adapter with the shortest suite time (cached numbers, measured where missing),
    among those of `backend` when given, and a one-line reason."""
    infos = adapter_infos()
    if backend:
        from .device import _BACKEND_ALIASES

        wanted = _BACKEND_ALIASES.get(backend.lower(), backend.lower())
        infos = [info for info in infos if info.backend.lower() == wanted]
    results = [(info, m, how) for info, m, how in measure_all(infos, use_cache=True) if m is not None and m.correct]
    if not results:
        raise GpuError("ANYGPU_ADAPTER=fastest: no adapter" + (f" of backend {backend}" if backend else "")
                       + " ran the measurement suite correctly (see 'anygpu info --measure')")
    results.sort(key=lambda item: item[1].suite_seconds)
    best, measurement, how = results[0]
    others = ", ".join(f"[{info.index}] {m.suite_seconds * 1e3:.1f} ms" for info, m, _ in results[1:])
    reason = (f"fastest by measurement: suite {measurement.suite_seconds * 1e3:.1f} ms"
              + (f" vs {others}" if others else " (the only adapter measured)")
              + f" ({how} {measurement.measured_at})")
    return best, reason


def table(results: list[tuple[AdapterInfo, Measurement | None, str]]) -> list[str]:
    """The lines `anygpu info --measure` prints: one row per adapter, fastest marked."""
    ranked = sorted((m.suite_seconds, info.index) for info, m, _ in results if m is not None and m.correct)
    best = ranked[0][1] if ranked else None
    lines = [f"measured (suite: {MATMUL_SIZE}^3 matmul, {COPY_BYTES >> 20} MiB copy, {DISPATCHES} dispatches; "
             f"best of {REPEATS}; cache {cache_path()}):",
             f"  {'':1} {'adapter':<44} {'matmul GFLOP/s':>14} {'copy GB/s':>10} {'dispatch us':>11} "
             f"{'suite ms':>9}  source"]
    for info, m, how in results:
        label = f"[{info.index}] {info.name} ({info.backend})"[:44]
        if m is None:
            lines.append(f"    {label:<44} {how}")
            continue
        mark = "+" if info.index == best else " "
        note = how if m.correct else f"{how}; WRONG matmul results, never chosen"
        lines.append(f"  {mark} {label:<44} {m.matmul_gflops:>14.2f} {m.bandwidth_gbs:>10.2f} {m.dispatch_us:>11.1f} "
                     f"{m.suite_seconds * 1e3:>9.1f}  {note} {m.measured_at}")
    if best is not None:
        lines.append(f"fastest (+): adapter [{best}]; ANYGPU_ADAPTER=fastest picks it")
    return lines


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
