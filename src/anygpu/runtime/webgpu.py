"""Which WebGPU implementation runs anygpu: wgpu-native (through wgpu-py) or Dawn (through
wgpudawn, the extra ``anygpu[dawn]``), chosen once per process by ``ANYGPU_RUNTIME``:

- ``wgpu``: wgpu-native.
- ``dawn``: Dawn; an error naming ``anygpu[dawn]`` when wgpudawn is not installed.
- ``auto`` (the default): Dawn where it is installed, one of its adapters offers subgroup
  matrices (``chromium-experimental-subgroup-matrix``: tensor cores and their kin from WGSL)
  with f16 configs, and a one-time self-check (a small subgroup-matrix matmul on that adapter
  against numpy) passes; wgpu-native otherwise.

`wgpu` below is the chosen implementation's module (wgpudawn has wgpu-py's API): every module
of anygpu.runtime uses it instead of ``import wgpu``. The choice is made on first use of an
attribute (the first adapter query), not at import. `current()` says what was chosen and why.

Dawn is opened with the instance toggle ``allow_unsafe_apis`` (its experimental features) and
the adapter toggles ``vulkan_enable_f16_on_nvidia`` (without it Dawn hides shader-f16, and so
every f16 matrix config, on NVIDIA) and ``use_vulkan_memory_model`` (the matrix feature needs
it on Vulkan); devices get ``timestamp_quantization`` off (exact GPU timings), and
``vulkan_use_cooperative_matrix_robust_access`` where they have subgroup matrices.
``ANYGPU_DAWN_TOGGLES`` adds Dawn toggles (comma-separated; ``-name`` disables one), e.g.
``skip_validation,disable_robustness`` to measure what validation and bounds checks cost.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import threading
import types
from dataclasses import dataclass, field

import numpy as np

from .errors import GpuError

ENV = "ANYGPU_RUNTIME"
CHOICES = ("auto", "wgpu", "dawn")
DAWN_EXTRA = "anygpu[dawn]"
MATRIX_FEATURE = "chromium-experimental-subgroup-matrix"
INSTANCE_TOGGLES = ("allow_unsafe_apis", "vulkan_enable_f16_on_nvidia", "use_vulkan_memory_model")
DEVICE_TOGGLES_OFF = ("timestamp_quantization",)
MATRIX_DEVICE_TOGGLES = ("vulkan_use_cooperative_matrix_robust_access",)

# anygpu's feature names (Device.features) -> Dawn's; wgpu-native uses anygpu's names.
DAWN_FEATURES = {
    "shader-f16": "shader-f16",
    "subgroup": "subgroups",
    "timestamp-query": "timestamp-query",
    "timestamp-query-inside-passes": "chromium-experimental-timestamp-query-inside-passes",
    "subgroup-matrix": MATRIX_FEATURE,
    # Dawn's objects are thread-safe only with it (host staging maps from a worker thread).
    "implicit-device-synchronization": "implicit-device-synchronization",
}

# Dawn's warnings on stderr that say nothing to a user: lavapipe's huge limits, clamped; a toggle
# anygpu asks for where it may help (MATRIX_DEVICE_TOGGLES), refused by a driver without it.
_BENIGN_STDERR = re.compile(r"^Warning: (\w+ artificially reduced from \d+ to \d+ to fit dynamic offset"
                            r'|Forcing toggle "(?:' + "|".join(MATRIX_DEVICE_TOGGLES) + r')" to 0 when it was 1)')


def requested() -> str:
    """ANYGPU_RUNTIME, checked: 'auto' (also when unset or empty), 'wgpu' or 'dawn'."""
    raw = os.environ.get(ENV, "")
    value = raw.strip().lower() or "auto"
    if value not in CHOICES:
        raise ValueError(f"{ENV}={raw!r}: expected one of {', '.join(CHOICES)}")
    return value


@dataclass(frozen=True)
class DawnReport:
    """What auto needs to know about Dawn on this machine (see `decide`)."""

    installed: bool
    detail: str = ""  # why not installed, or its version
    matrix_adapter: str | None = None  # the adapter whose subgroup matrices were checked
    check: str | None = None  # None: not run; "passed"; else what failed
    adapters: tuple[str, ...] = ()  # every adapter Dawn sees


def decide(choice: str, report: DawnReport | None) -> tuple[str, str]:
    """(runtime, reason) for ANYGPU_RUNTIME=`choice` given what is known about Dawn (`report`,
    unused for 'wgpu'). Raises GpuError when Dawn is asked for and not installed."""
    if choice == "wgpu":
        return "wgpu", f"{ENV}=wgpu"
    if report is None or not report.installed:
        detail = report.detail if report is not None else ""
        if choice == "dawn":
            raise GpuError(f"{ENV}=dawn needs Dawn's Python package wgpudawn, which is not installed"
                           f"{f' ({detail})' if detail else ''}: pip install '{DAWN_EXTRA}'")
        return "wgpu", f"Dawn is not installed (pip install '{DAWN_EXTRA}' for matrix units)"
    if choice == "dawn":
        return "dawn", f"{ENV}=dawn"
    if report.matrix_adapter is None:
        seen = ", ".join(report.adapters) or "no adapter"
        return "wgpu", f"Dawn ({report.detail}) offers no f16 subgroup matrices here ({seen})"
    if report.check != "passed":
        return "wgpu", (f"Dawn's subgroup-matrix self-check failed on {report.matrix_adapter} "
                        f"({report.check})")
    return "dawn", (f"Dawn ({report.detail}) offers subgroup matrices on {report.matrix_adapter} "
                    f"and its self-check passed")


@dataclass
class Runtime:
    """The chosen implementation: `name` 'wgpu' or 'dawn', `module` (wgpu or wgpudawn), why."""

    name: str
    module: types.ModuleType
    reason: str
    version: str
    # Self-check results per adapter key (see `_adapter_key`): {(M, N, K, type, result): passed}
    checks: dict = field(default_factory=dict)
    check_errors: dict = field(default_factory=dict)


_lock = threading.RLock()
_current: Runtime | None = None


def current() -> Runtime:
    """The runtime of this process, chosen on the first call (see the module docstring)."""
    global _current
    if _current is None:
        with _lock:
            if _current is None:
                _current = _select(requested())
    return _current


def _version(package: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "unknown"


def _select(choice: str) -> Runtime:
    report = None
    if choice != "wgpu":
        try:
            dawn = _load_dawn()
        except ImportError as exc:
            report = DawnReport(False, str(exc))
        except ValueError:  # ANYGPU_DAWN_TOGGLES names a toggle Dawn does not have
            raise
        except Exception as exc:  # installed but cannot start (no Vulkan loader, ...)
            if choice == "dawn":
                raise GpuError(f"{ENV}=dawn: Dawn could not start: {' '.join(str(exc).split())[:300]}") from exc
            report = DawnReport(True, f"wgpudawn {_version('wgpudawn')}, which could not start: {exc}")
        else:  # what auto weighs (ANYGPU_RUNTIME=dawn takes Dawn as it is)
            report = _dawn_report(dawn) if choice == "auto" else DawnReport(True, f"wgpudawn {_version('wgpudawn')}")
    name, reason = decide(choice, report)
    if name == "dawn":
        runtime = Runtime("dawn", sys.modules["wgpudawn"], reason, _version("wgpudawn"))
        runtime.checks, runtime.check_errors = _checks, _check_errors
        return runtime
    import wgpu as module

    return Runtime("wgpu", module, reason, _version("wgpu"))


# ---------------------------------------------------------------------------- Dawn

_dawn_loaded = False
_checks: dict = {}  # adapter key -> {(M, N, K, type, result): passed}
_check_errors: dict = {}  # adapter key -> what failed, if anything


def _load_dawn():
    """wgpudawn with anygpu's toggles on its instance (made here, once). ImportError when it is
    not installed."""
    global _dawn_loaded
    import wgpudawn
    from wgpudawn.backends.dawn import extras

    with _lock:
        if not _dawn_loaded:
            known = extras.all_toggles()
            enable = [t for t in INSTANCE_TOGGLES if t in known]
            disable: list[str] = []
            for name in _user_toggles():
                stage = known.get(name.lstrip("-"), {}).get("stage")
                if stage is None:
                    raise ValueError(f"ANYGPU_DAWN_TOGGLES: Dawn has no toggle {name.lstrip('-')!r}")
                if stage != "device":
                    (disable if name.startswith("-") else enable).append(name.lstrip("-"))
            try:
                extras.set_instance_extras(enable_toggles=enable, disable_toggles=disable)
            except RuntimeError:  # someone made Dawn's instance already: use it as it is
                pass
            _dawn_loaded = True
    return wgpudawn


def _user_toggles() -> list[str]:
    return [t.strip() for t in os.environ.get("ANYGPU_DAWN_TOGGLES", "").split(",") if t.strip()]


def quiet_stderr(fn):
    """fn()'s result, with Dawn's benign warnings on stderr (`_BENIGN_STDERR`) left out and
    everything else it writes there passed on. Dawn writes them from C, so fd 2 is redirected
    (on Dawn only: elsewhere fn() runs as it is)."""
    if _current is not None and _current.name != "dawn":
        return fn()
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        return fn()
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            return fn()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            lines = sink.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not _BENIGN_STDERR.match(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


def _adapter_key(adapter) -> tuple:
    info = adapter.info
    return (info.get("device", ""), info.get("description", ""), info.get("vendor_id", 0),
            info.get("device_id", 0), info.get("backend_type", ""))


def _subgroup_max(adapter) -> int:
    """The adapter's largest subgroup size (Dawn's adapter info), 0 when unknown."""
    try:
        from wgpudawn.backends.dawn._api import ffi, lib

        info = ffi.new("WGPUAdapterInfo *")
        if lib.wgpuAdapterGetInfo(adapter._internal, info) != lib.WGPUStatus_Success:
            return 0
        size = int(info.subgroupMaxSize)
        lib.wgpuAdapterInfoFreeMembers(info[0])
        return size
    except (ImportError, AttributeError):
        return 0


def raw_matrix_configs(adapter) -> list[dict]:
    """The subgroup-matrix configs a Dawn adapter offers: dicts with M, N, K, component_type,
    result_type ('f16', 'f32', 'i8', 'u8', 'i32', 'u32'), min/max_subgroup_size."""
    if MATRIX_FEATURE not in adapter.features:
        return []
    from wgpudawn.backends.dawn import extras

    found = extras.get_adapter_properties(adapter).get("subgroup_matrix_configs") or []
    return [{"M": int(c["m"]), "N": int(c["n"]), "K": int(c["k"]), "component_type": str(c["component_type"]),
             "result_type": str(c["result_component_type"]), "min_subgroup_size": int(c.get("min_subgroup_size") or 0),
             "max_subgroup_size": int(c.get("max_subgroup_size") or 0)} for c in found]


def _config_key(config: dict) -> tuple:
    return (config["M"], config["N"], config["K"], config["component_type"], config["result_type"])


def _checkable(config: dict) -> bool:
    return config["component_type"] == "f16" and config["result_type"] in ("f16", "f32")


def _dawn_report(wgpudawn) -> DawnReport:
    """Dawn's adapters, the first (discrete first) with f16 subgroup matrices, and the
    self-check on it. Runs while the runtime is being chosen: nothing here may call current()."""
    detail = f"wgpudawn {_version('wgpudawn')}"
    try:
        adapters = quiet_stderr(wgpudawn.gpu.enumerate_adapters_sync)
    except Exception as exc:  # no loader, broken driver: Dawn is of no use here
        return DawnReport(True, f"{detail}, no adapters: {exc}")
    names = tuple(f"{a.info.get('device', '?')} ({a.info.get('backend_type', '?')})" for a in adapters)
    rank = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
    offering = [a for a in adapters if any(_checkable(c) for c in raw_matrix_configs(a))]
    if not offering:
        return DawnReport(True, detail, adapters=names)
    offering.sort(key=lambda a: rank.get(a.info.get("adapter_type"), 4))
    adapter = offering[0]
    name = adapter.info.get("device", "?")
    results = self_check(adapter)
    failed = _check_errors.get(_adapter_key(adapter))
    outcome = "passed" if any(results.values()) else (failed or "no config passed")
    return DawnReport(True, detail, name, outcome, names)


_CHECK_STEPS = 2  # K steps accumulated, so MultiplyAccumulate's accumulation is checked too


def matrix_check_kernel(config: dict, subgroup_size: int, spelling: str = "new") -> str:
    """WGSL of the self-check: one subgroup computes C (M x N, result type) = A (M x 2K, f16) @
    B (2K x N, f16), all row-major, in two K steps. spelling 'new' is current Dawn's
    (majorness as a template argument), 'old' the first releases' (a bool argument)."""
    m, n, k, result = config["M"], config["N"], config["K"], config["result_type"]
    kk = _CHECK_STEPS * k

    def load(kind, pointer, offset, stride):
        if spelling == "new":
            return f"subgroupMatrixLoad<{kind}, row_major>({pointer}, {offset}, {stride})"
        return f"subgroupMatrixLoad<{kind}>({pointer}, {offset}, false, {stride})"

    store = (f"subgroupMatrixStore<row_major>(&c, 0u, acc, {n}u);" if spelling == "new"
             else f"subgroupMatrixStore(&c, 0u, acc, false, {n}u);")
    return f"""enable f16;
enable chromium_experimental_subgroup_matrix;
diagnostic(off, chromium.subgroup_matrix_uniformity);
alias Left = subgroup_matrix_left<f16, {k}, {m}>;
alias Right = subgroup_matrix_right<f16, {n}, {k}>;
alias Result = subgroup_matrix_result<{result}, {n}, {m}>;
@group(0) @binding(0) var<storage, read> a: array<f16>;
@group(0) @binding(1) var<storage, read> b: array<f16>;
@group(0) @binding(2) var<storage, read_write> c: array<{result}>;
@compute @workgroup_size({subgroup_size})
fn main() {{
    var acc = Result();
    for (var step = 0u; step < {_CHECK_STEPS}u; step++) {{
        let left = {load("Left", "&a", f"step * {k}u", f"{kk}u")};
        let right = {load("Right", "&b", f"step * {k * n}u", f"{n}u")};
        acc = subgroupMatrixMultiplyAccumulate(left, right, acc);
    }}
    {store}
}}
"""


def self_check(adapter, device=None) -> dict:
    """{config key: passed} for each f16 config of a Dawn `adapter` (once per adapter and
    process): a small matmul on subgroup matrices, compared with numpy exactly (small integers
    are exact in f16). Runs on `device` if given (it must have the matrix feature and
    shader-f16), else on a device of its own."""
    key = _adapter_key(adapter)
    with _lock:
        if key in _checks:
            return _checks[key]
        configs = [c for c in raw_matrix_configs(adapter) if _checkable(c)]
        results: dict = {}
        errors: list[str] = []
        if configs:
            own = device is None
            try:
                if own:  # runtime given: this may run while the runtime is being chosen
                    # The features and limits the real device asks for: on the H200 a device with
                    # the matrix feature but without subgroups and the adapter's limits failed in
                    # vkCreateDevice (VK_ERROR_INITIALIZATION_FAILED), so auto never chose Dawn.
                    device = open_device(adapter, ["subgroup-matrix", "shader-f16", "subgroup"],
                                         dict(adapter.limits), runtime="dawn")[0]
                for config in configs:
                    try:
                        _run_check(device, config, max(config["max_subgroup_size"], _subgroup_max(adapter), 1))
                        results[_config_key(config)] = True
                    except Exception as exc:
                        results[_config_key(config)] = False
                        errors.append(f"{config['M']}x{config['N']}x{config['K']} "
                                      f"{config['component_type']}->{config['result_type']}: "
                                      + " ".join(str(exc).split())[:300])
            except Exception as exc:
                errors.append("device: " + " ".join(str(exc).split())[:300])
            if own and device is not None:
                device.destroy()
        _checks[key] = results
        if errors:
            _check_errors[key] = "; ".join(errors)
        return results


def _run_check(device, config: dict, subgroup_size: int) -> None:
    import wgpudawn

    m, n, k = config["M"], config["N"], config["K"]
    kk = _CHECK_STEPS * k
    rng = np.random.default_rng(7)
    a = rng.integers(-2, 3, (m, kk)).astype(np.float16)
    b = rng.integers(-2, 3, (kk, n)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    result = np.float16 if config["result_type"] == "f16" else np.float32
    pipeline = None
    failures = []
    for spelling in ("new", "old"):
        try:
            module = device.create_shader_module(code=matrix_check_kernel(config, subgroup_size, spelling))
            pipeline = device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})
            break
        except Exception as exc:
            failures.append(f"{spelling} spelling: {' '.join(str(exc).split())[:200]}")
    if pipeline is None:
        raise GpuError("; ".join(failures))
    usage = wgpudawn.BufferUsage.STORAGE | wgpudawn.BufferUsage.COPY_SRC | wgpudawn.BufferUsage.COPY_DST
    out_bytes = -(-m * n * np.dtype(result).itemsize // 4) * 4
    buffers = [device.create_buffer_with_data(data=a.tobytes(), usage=usage),
               device.create_buffer_with_data(data=b.tobytes(), usage=usage),
               device.create_buffer(size=out_bytes, usage=usage)]
    group = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": i, "resource": {"buffer": buf}} for i, buf in enumerate(buffers)])
    encoder = device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, group)
    compute.dispatch_workgroups(1, 1, 1)
    compute.end()
    device.queue.submit([encoder.finish()])
    got = np.frombuffer(device.queue.read_buffer(buffers[2]), dtype=result)[:m * n].reshape(m, n)
    for buf in buffers:
        buf.destroy()
    if not np.array_equal(got.astype(np.float64), want):
        worst = float(np.abs(got.astype(np.float64) - want).max())
        raise GpuError(f"wrong result (largest error {worst:g} against numpy)")


def matrix_configs(dev) -> list[dict]:
    """The subgroup-matrix configs of Device `dev` (empty unless it runs on Dawn with the
    feature): dicts with M, N, K, component_type, result_type, min/max_subgroup_size, and
    `checked`: True when the self-check passed on this adapter, False when it failed, None
    when not checkable (integer configs)."""
    return list(getattr(dev, "matrix_configs", []))


def device_matrix_configs(adapter, device) -> list[dict]:
    """Device.matrix_configs for a Dawn device opened with the matrix feature."""
    results = self_check(adapter, device)
    configs = []
    for config in raw_matrix_configs(adapter):
        checked = results.get(_config_key(config)) if _checkable(config) else None
        configs.append({**config, "checked": checked})
    return configs


# ---------------------------------------------------------------------------- devices

def adapter_features(adapter, runtime: str | None = None) -> dict[str, str]:
    """{anygpu's name: the runtime's name} of the features anygpu uses that `adapter` offers
    (`runtime`: 'wgpu' or 'dawn', the chosen one by default)."""
    offered = set(adapter.features)
    if (runtime or current().name) == "dawn":
        return {ours: theirs for ours, theirs in DAWN_FEATURES.items() if theirs in offered}
    wanted = ("timestamp-query", "timestamp-query-inside-passes", "subgroup", "shader-f16")
    return {name: name for name in wanted if name in offered}


def open_device(adapter, features, limits, runtime: str | None = None):
    """(wgpu device, anygpu feature names granted) on `adapter` with anygpu's `features` (those
    it offers; names as in Device.features) and `limits` (None: defaults). `runtime`: 'wgpu' or
    'dawn', the chosen one by default."""
    runtime = runtime or current().name
    offered = adapter_features(adapter, runtime)
    names = sorted(f for f in features if f in offered)
    native_names = [offered[f] for f in names]
    if runtime != "dawn":
        device = adapter.request_device_sync(required_features=native_names, required_limits=limits or {})
        return device, names
    from wgpudawn.backends.dawn import extras

    known = extras.all_toggles()
    enable = [t for t in MATRIX_DEVICE_TOGGLES if t in known] if "subgroup-matrix" in names else []
    disable = [t for t in DEVICE_TOGGLES_OFF if t in known]
    for name in _user_toggles():
        bare = name.lstrip("-")
        if known.get(bare, {}).get("stage") == "device":
            target, other = (disable, enable) if name.startswith("-") else (enable, disable)
            if bare in other:
                other.remove(bare)
            if bare not in target:
                target.append(bare)
    device = quiet_stderr(lambda: extras.request_device_sync(
        adapter, required_features=native_names, required_limits=limits or {},
        enable_toggles=enable, disable_toggles=disable))
    return device, names


# ---------------------------------------------------------------------------- the module

class _Api(types.ModuleType):
    """The chosen implementation's module (see the module docstring): an attribute read
    chooses the runtime if not done yet, then is remembered here (reads stay cheap)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(current().module, name)
        if name != "gpu":  # replaced in the module when a backend loads: always read afresh
            setattr(self, name, value)
        return value


wgpu = _Api("anygpu.runtime.webgpu.wgpu", "wgpu-py's API, on the runtime ANYGPU_RUNTIME chooses")


def describe_matrices(dev) -> str:
    """One line on Device `dev`'s subgroup matrices, for `anygpu info`."""
    if dev.runtime != "dawn":
        return (f"need the Dawn runtime ({ENV}=dawn, or auto where Dawn offers them; "
                f"pip install '{DAWN_EXTRA}')")
    if not dev.matrix_configs:
        return f"not offered by {dev.adapter_name} on Dawn"
    verdicts = {True: "checked", False: "FAILED the self-check", None: "not checked"}
    return ", ".join(f"{c['M']}x{c['N']}x{c['K']} {c['component_type']}->{c['result_type']} "
                     f"({verdicts[c['checked']]})" for c in dev.matrix_configs)
