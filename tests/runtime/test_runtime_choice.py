"""ANYGPU_RUNTIME (runtime/webgpu.py): the env values, auto's decision and its reason, Dawn asked
for but missing, `anygpu info`'s lines, the Tint fixes, and ops agreeing on both runtimes."""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from anygpu.cli import main
from anygpu.runtime import webgpu
from anygpu.runtime.errors import GpuError
from anygpu.runtime.shaders import for_dawn

HAVE_DAWN = importlib.util.find_spec("wgpudawn") is not None


def _child(code: str, runtime: str, timeout: float = 300, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, webgpu.ENV: runtime, **env}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


# ---------------------------------------------------------------------------- the env value

@pytest.mark.parametrize("raw, want", [(None, "auto"), ("", "auto"), ("  ", "auto"), ("auto", "auto"),
                                       ("wgpu", "wgpu"), (" Dawn ", "dawn"), ("WGPU", "wgpu")])
def test_requested_reads_the_env_value(monkeypatch, raw, want):
    if raw is None:
        monkeypatch.delenv(webgpu.ENV, raising=False)
    else:
        monkeypatch.setenv(webgpu.ENV, raw)
    assert webgpu.requested() == want


@pytest.mark.parametrize("raw", ["vulkan", "wgpu-native", "dawn,wgpu", "0"])
def test_a_bad_value_is_a_value_error_naming_the_variable_and_the_choices(monkeypatch, raw):
    monkeypatch.setenv(webgpu.ENV, raw)
    with pytest.raises(ValueError, match=r"ANYGPU_RUNTIME=.*expected one of auto, wgpu, dawn") as info:
        webgpu.requested()
    assert repr(raw) in str(info.value)


# ---------------------------------------------------------------------------- auto's decision

def test_wgpu_is_taken_when_asked_whatever_dawn_offers():
    report = webgpu.DawnReport(True, "wgpudawn 9", "Big GPU", "passed", ("Big GPU (Vulkan)",))
    assert webgpu.decide("wgpu", report) == ("wgpu", "ANYGPU_RUNTIME=wgpu")


def test_auto_without_dawn_takes_wgpu_and_names_the_extra():
    name, reason = webgpu.decide("auto", webgpu.DawnReport(False, "No module named 'wgpudawn'"))
    assert name == "wgpu" and "anygpu[dawn]" in reason and "not installed" in reason


def test_dawn_asked_for_but_missing_is_an_error_naming_the_extra():
    with pytest.raises(GpuError, match=r"ANYGPU_RUNTIME=dawn.*wgpudawn.*pip install 'anygpu\[dawn\]'"):
        webgpu.decide("dawn", webgpu.DawnReport(False, "No module named 'wgpudawn'"))


def test_auto_takes_wgpu_where_dawn_offers_no_matrices():
    report = webgpu.DawnReport(True, "wgpudawn 9", None, None, ("llvmpipe (Vulkan)",))
    name, reason = webgpu.decide("auto", report)
    assert name == "wgpu" and "no f16 subgroup matrices" in reason and "llvmpipe (Vulkan)" in reason


def test_auto_takes_wgpu_when_the_self_check_fails_and_says_what_failed():
    report = webgpu.DawnReport(True, "wgpudawn 9", "Big GPU", "16x16x16 f16->f32: wrong result", ("Big GPU (Vulkan)",))
    name, reason = webgpu.decide("auto", report)
    assert name == "wgpu" and "self-check failed on Big GPU" in reason and "wrong result" in reason


def test_auto_takes_dawn_when_matrices_are_offered_and_checked():
    report = webgpu.DawnReport(True, "wgpudawn 9", "Big GPU", "passed", ("Big GPU (Vulkan)",))
    name, reason = webgpu.decide("auto", report)
    assert name == "dawn" and "Big GPU" in reason and "self-check passed" in reason


def test_dawn_asked_for_is_taken_without_matrices():
    assert webgpu.decide("dawn", webgpu.DawnReport(True, "wgpudawn 9"))[0] == "dawn"


def test_missing_dawn_simulated_by_a_failing_import(monkeypatch):
    """wgpudawn made unimportable (None in sys.modules): 'dawn' raises naming the extra, 'auto'
    falls back to wgpu-native and says why."""
    monkeypatch.setitem(sys.modules, "wgpudawn", None)
    with pytest.raises(GpuError, match=r"anygpu\[dawn\]"):
        webgpu._select("dawn")
    runtime = webgpu._select("auto")
    assert runtime.name == "wgpu" and "anygpu[dawn]" in runtime.reason
    assert runtime.module.__name__ == "wgpu"


_AUTO_WITH_FAKE_MATRICES = """
    import json
    from anygpu.runtime import webgpu, GpuError

    # lavapipe has no subgroup matrices: pretend Dawn's adapter lists one f16 config, and stand in
    # for the GPU part of the self-check (passing, or failing as a wrong result would).
    fake = [{"M": 8, "N": 8, "K": 8, "component_type": "f16", "result_type": "f32",
             "min_subgroup_size": 8, "max_subgroup_size": 8},
            {"M": 8, "N": 8, "K": 32, "component_type": "i8", "result_type": "i32",
             "min_subgroup_size": 8, "max_subgroup_size": 8}]
    webgpu.raw_matrix_configs = lambda adapter: fake
    calls = []

    def run_check(device, config, subgroup_size):
        calls.append([config["M"], config["component_type"], subgroup_size])
        if FAIL:
            raise GpuError("wrong result (largest error 3 against numpy)")

    webgpu._run_check = run_check
    import anygpu as ag
    dev = ag.gpu()
    print(json.dumps({"runtime": dev.runtime, "reason": dev.runtime_reason, "calls": calls}))
"""


@pytest.mark.parametrize("fail", [False, True])
def test_auto_runs_the_self_check_once_and_follows_it(fail):
    """auto's whole path where Dawn offers matrices (simulated): the self-check runs once, on the
    f16 config only, while the runtime is being chosen; a failure sends auto to wgpu-native."""
    _dawn_or_skip()
    done = _child(f"FAIL = {fail}\n" + textwrap.dedent(_AUTO_WITH_FAKE_MATRICES), "auto", timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(result["calls"]) == 1 and result["calls"][0][:2] == [8, "f16"]  # at the adapter's subgroup size
    if fail:
        assert result["runtime"] == "wgpu"
        assert "self-check failed" in result["reason"] and "wrong result" in result["reason"]
    else:
        assert result["runtime"] == "dawn" and "self-check passed" in result["reason"]


def test_dawn_that_cannot_start_sends_auto_to_wgpu_and_fails_dawn_clearly(monkeypatch):
    def broken():
        raise RuntimeError("no Vulkan loader")

    monkeypatch.setattr(webgpu, "_load_dawn", broken)
    runtime = webgpu._select("auto")
    assert runtime.name == "wgpu" and "could not start: no Vulkan loader" in runtime.reason
    with pytest.raises(GpuError, match="ANYGPU_RUNTIME=dawn: Dawn could not start: no Vulkan loader"):
        webgpu._select("dawn")


def test_the_cli_reports_missing_dawn_in_one_line():
    code = """
        import sys
        sys.modules["wgpudawn"] = None  # as if not installed
        from anygpu.cli import main
        sys.exit(main(["info"]))
    """
    done = _child(code, "dawn", timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("anygpu: error: ") and "anygpu[dawn]" in lines[0], done.stderr


def test_the_cli_reports_a_bad_value_in_one_line():
    done = subprocess.run([sys.executable, "-m", "anygpu", "info"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, webgpu.ENV: "vulkan"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "anygpu: error: ANYGPU_RUNTIME='vulkan': expected one of auto, wgpu, dawn"]


# ---------------------------------------------------------------------------- this process

def test_the_device_says_which_runtime_and_why(dev):
    runtime = webgpu.current()
    assert dev.runtime == runtime.name in ("wgpu", "dawn")
    assert dev.runtime_reason == runtime.reason and dev.runtime_reason
    assert webgpu.wgpu.GPUError is runtime.module.GPUError  # the module every runtime file uses
    if webgpu.requested() != "auto":
        assert dev.runtime == webgpu.requested()
    configs = webgpu.matrix_configs(dev)
    assert configs == dev.matrix_configs
    if dev.runtime == "wgpu":
        assert configs == []
    for config in configs:
        assert {"M", "N", "K", "component_type", "result_type", "checked"} <= set(config)


def test_info_prints_the_runtime_its_reason_and_the_matrices(capsys, dev):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    runtime_line = next(line for line in out.splitlines() if line.startswith("runtime: "))
    assert runtime_line.startswith(f"runtime: {dev.runtime} (") and dev.runtime_reason in runtime_line
    matrices = next(line for line in out.splitlines() if line.startswith("subgroup matrices: "))
    if dev.matrix_configs:
        first = dev.matrix_configs[0]
        assert f"{first['M']}x{first['N']}x{first['K']} {first['component_type']}->{first['result_type']}" in matrices
    elif dev.runtime == "wgpu":
        assert "need the Dawn runtime" in matrices and "anygpu[dawn]" in matrices
    else:
        assert "not offered" in matrices


def test_describe_matrices_lists_each_config_and_its_verdict():
    class Fake:
        runtime, adapter_name = "dawn", "Big GPU"
        matrix_configs = [
            {"M": 16, "N": 16, "K": 16, "component_type": "f16", "result_type": "f32", "checked": True},
            {"M": 16, "N": 8, "K": 16, "component_type": "f16", "result_type": "f16", "checked": False},
            {"M": 16, "N": 16, "K": 32, "component_type": "i8", "result_type": "i32", "checked": None}]

    assert webgpu.describe_matrices(Fake()) == (
        "16x16x16 f16->f32 (checked), 16x8x16 f16->f16 (FAILED the self-check), 16x16x32 i8->i32 (not checked)")
    Fake.matrix_configs = []
    assert webgpu.describe_matrices(Fake()) == "not offered by Big GPU on Dawn"


def test_dawns_benign_warnings_are_dropped_and_the_rest_of_stderr_kept():
    code = r"""
        import os
        from anygpu.runtime import webgpu

        def noisy():
            os.write(2, b"Warning: maxDynamicUniformBuffersPerPipelineLayout artificially reduced from 1000000 "
                        b"to 16 to fit dynamic offset allocation limit.\n")
            os.write(2, b'Warning: Forcing toggle "vulkan_use_cooperative_matrix_robust_access" to 0 when it was 1\n')
            os.write(2, b"a real problem\n")
            return 7

        print(webgpu.quiet_stderr(noisy))
    """
    done = _child(code, "dawn", timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "7"
    assert done.stderr == "a real problem\n"


# ---------------------------------------------------------------------------- WGSL for Tint

def test_enable_subgroups_is_added_only_where_subgroup_builtins_are_used():
    plain = "@compute @workgroup_size(64) fn main() { }\n"
    assert for_dawn(plain) == plain
    uses = "fn f(v: f32) -> f32 { return subgroupAdd(v); }\n"
    assert for_dawn(uses) == "enable subgroups;\n" + uses
    builtin = "@compute @workgroup_size(64) fn main(@builtin(subgroup_invocation_id) lane: u32) { }\n"
    assert for_dawn(builtin).startswith("enable subgroups;\n")
    already = "enable f16;\nenable subgroups;\n" + uses
    assert for_dawn(already) == already
    matrices = "fn f() { let m = subgroupMatrixLoad<L, row_major>(&a, 0u, 16u); }\n"
    assert for_dawn(matrices) == matrices  # subgroup matrices need their own feature, not subgroups


def _dawn_or_skip():
    if not HAVE_DAWN:
        pytest.skip("wgpudawn (anygpu[dawn]) is not installed")


def test_the_self_check_kernel_compiles_on_dawn_for_the_h200_configs():
    """Tint's Null backend (no GPU needed) compiles the self-check kernel for the configs the
    H200 offers, in both result types: a typo in the WGSL would fail here, not first on a GPU."""
    _dawn_or_skip()
    code = """
        import json, os, sys
        import wgpudawn
        from wgpudawn.backends.dawn import extras
        from anygpu.runtime.webgpu import MATRIX_FEATURE, matrix_check_kernel
        extras.set_instance_extras(enable_toggles=["allow_unsafe_apis"])
        adapter = wgpudawn.gpu.request_adapter_sync(power_preference="high-performance")
        if adapter is None or MATRIX_FEATURE not in adapter.features:
            print(json.dumps("no null adapter with the feature")); sys.exit(0)
        device = extras.request_device_sync(adapter, required_features=[MATRIX_FEATURE, "shader-f16"])
        errors = []
        for m, n, k in ((16, 16, 16), (16, 8, 16), (16, 8, 8), (8, 8, 8)):
            for result in ("f32", "f16"):
                config = {"M": m, "N": n, "K": k, "component_type": "f16", "result_type": result}
                try:
                    device.create_shader_module(code=matrix_check_kernel(config, 32))
                except Exception as exc:
                    errors.append(f"{config}: {exc}")
        print(json.dumps(errors))
    """
    done = _child(code, "dawn", timeout=120, WGPU_BACKEND_TYPE="Null")
    assert done.returncode == 0, done.stderr
    errors = json.loads(done.stdout.strip().splitlines()[-1])
    if errors == "no null adapter with the feature":
        pytest.skip(errors)
    assert errors == []


# ---------------------------------------------------------------------------- both runtimes agree

_OPS = """
    import json, sys
    import numpy as np
    import anygpu as ag
    import anygpu.nn.functional as F

    rng = np.random.default_rng(5)
    out = {}
    a = rng.standard_normal((37, 53)).astype(np.float32)
    b = rng.standard_normal((53, 29)).astype(np.float32)
    out["matmul"] = (ag.tensor(a) @ ag.tensor(b)).numpy()
    x = rng.standard_normal((7, 301)).astype(np.float32)
    out["softmax"] = F.softmax(ag.tensor(x), dim=-1).numpy()
    out["layer_norm"] = F.layer_norm(ag.tensor(x), (301,)).numpy()
    img = rng.standard_normal((2, 3, 11, 13)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    out["conv2d"] = F.conv2d(ag.tensor(img), ag.tensor(w), padding=1).numpy()
    out["max_pool2d"] = F.max_pool2d(ag.tensor(-np.abs(img) - 1e30), 3, stride=2, padding=1).numpy()
    logits = rng.standard_normal((6, 9)).astype(np.float32)
    logits[2, 4] = np.nan
    target = ag.tensor(np.array([0, 3, 8, 1, 2, 5], dtype=np.int64))
    out["cross_entropy"] = F.cross_entropy(ag.tensor(logits), target, reduction="none").numpy()
    base = ag.tensor(np.array([0.0, -0.0, 2.0, -2.0, np.nan, np.inf], dtype=np.float32))
    out["pow_odd"] = (base ** -1.0).numpy()
    out["pow_even"] = (base ** -2.0).numpy()
    out["sum"] = ag.tensor(rng.standard_normal(10001).astype(np.float32)).sum().numpy()
    print(json.dumps({"runtime": ag.gpu().runtime,
                      "ops": {k: np.asarray(v, np.float64).tolist() for k, v in out.items()}}))
"""


def _ops_on(runtime: str) -> dict:
    done = _child(_OPS, runtime)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["runtime"] == runtime
    return {k: np.array(v, dtype=np.float64) for k, v in result["ops"].items()}


def test_ops_agree_on_dawn_and_wgpu():
    _dawn_or_skip()
    wgpu_results, dawn_results = _ops_on("wgpu"), _ops_on("dawn")
    assert wgpu_results.keys() == dawn_results.keys()
    for name, want in wgpu_results.items():
        np.testing.assert_allclose(dawn_results[name], want, rtol=2e-5, atol=1e-5, equal_nan=True, err_msg=name)
    # and both against the plain truth where it is simple
    inf = np.inf
    np.testing.assert_array_equal(dawn_results["pow_odd"], [inf, -inf, 0.5, -0.5, np.nan, 0.0])
    np.testing.assert_array_equal(dawn_results["pow_even"], [inf, inf, 0.25, 0.25, np.nan, 0.0])
    assert np.isnan(dawn_results["cross_entropy"][2]) and np.isfinite(np.delete(dawn_results["cross_entropy"], 2)).all()
    assert np.isfinite(dawn_results["max_pool2d"]).all()
