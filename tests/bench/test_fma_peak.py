"""benchmarks/fma_peak.py: its kernels compute the multiply-add chain they are credited with.

Timing is never asserted; what is checked is that the value each invocation writes equals
the chain computed on the host (so the TFLOP/s the probe prints count work really done),
and that the WGSL holds as many multiply-adds per iteration as the flop count assumes."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import anygpu as ag

pytestmark = pytest.mark.fast

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fma_peak.py"


@pytest.fixture(scope="module")
def fma_peak():
    spec = importlib.util.spec_from_file_location("fma_peak", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fma_peak"] = module  # dataclasses look the module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["fma_peak"]
    return module


def test_quick_run_checks_every_variant_and_writes_json(fma_peak, tmp_path, capsys):
    out = tmp_path / "fma.json"
    code = fma_peak.main(["--quick", "--json", str(out), "--ilp", "1,4", "--wg", "64,128"])
    assert code == 0
    report = json.loads(out.read_text())
    results = report["results"]
    f32 = [r for r in results if r["dtype"] == "f32"]
    assert len(f32) == 2 * 2 * 2 * 2 + 3  # ilp x widths x forms x workgroup sizes, then 3 trusted
    assert sum(r["trusted"] for r in f32) == 3
    assert len([r for r in results if r["dtype"] == "f16"]) == (4 if ag.gpu().supports("f16") else 0)
    assert report["wrong_or_failed"] == []
    for r in results:
        # the output equals NumPy's chain: exactly (fused or unfused), or within double rounding
        assert r["check"] in ("fused", "unfused", "close") and r["max_rel_err"] < 1e-5, r
        assert r["seconds"] > 0 and r["tflops"] > 0
        assert r["fmas"] == report["threads"] * report["iters"] * report["body"]
    assert report["best"]["f32"]["tflops"] == max(r["tflops"] for r in f32)
    assert "best f32:" in capsys.readouterr().out


def python_chain(lane: int, j: int, k: int, width: int, steps: int, mul: float, add: float, host) -> float:
    """Accumulator j, component k of `lane` after `steps` steps, one Python step at a time
    (mul and add chosen so that every product and sum is exact: fused = unfused)."""
    a = host(np.float32(lane * 0.125) + np.float32(j * width + k))
    for _ in range(steps):
        a = host(float(a) * mul + add)
    return float(a)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("width, ilp, form", [(1, 1, "fma"), (1, 3, "muladd"), (4, 2, "fma"), (2, 5, "muladd")])
def test_kernel_output_equals_the_host_chain(fma_peak, dtype, width, ilp, form):
    dev = ag.gpu()
    if not dev.supports(dtype):
        pytest.skip("no shader-f16")
    v = fma_peak.Variant(dtype, width, ilp, form, 64, body=24)
    source = fma_peak.wgsl(v)
    step = "fma(a" if form == "fma" else " * m + c"
    assert source.count(step) * width == v.fmas_per_iter == v.unroll * ilp * width  # the flop count's premise
    probe = fma_peak.Probe(dev, threads=256, iters=5, budget=0.01)
    host = np.float16 if dtype == "f16" else np.float32
    # mul 1, add 1/8: each step adds exactly 1/8, so the result counts the steps taken
    for mul, add in ((1.0, 0.125), (0.5, 0.25)):
        probe.launch(v, probe.out, 5, mul, add)
        got = dev.read(probe.out)
        want = fma_peak.expected(v, 5, mul, add, fused=True)
        assert np.array_equal(want, fma_peak.expected(v, 5, mul, add, fused=False))
        np.testing.assert_array_equal(got, want[np.arange(256) % fma_peak.LANES])
        steps = 5 * v.unroll
        for lane in (0, 7, 63):
            total = np.float32(0)
            for j in range(ilp):
                for k in range(width):
                    total = np.float32(total + np.float32(python_chain(lane, j, k, width, steps, mul, add, host)))
            assert got[lane] == total
    # the timed runs' parameters: exact agreement with the fused or the unfused chain
    result = probe.check(v, fma_peak.MUL[dtype], fma_peak.ADD[dtype])
    assert result["check"] in ("fused", "unfused", "close") and result["max_rel_err"] < 1e-5, result
