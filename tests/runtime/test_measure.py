"""runtime/measure.py with an adapter that fails: at the device request, at pipeline creation,
at a dispatch or at read-back (simulated on lavapipe by a Device that raises at that point,
as the OpenGL adapter of an H200 host does for real). The table reports it unusable with a
short reason, `fastest` never picks it, and the process's main device keeps working."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

import anygpu as ag
from anygpu import ops
from anygpu.runtime import measure

# What wgpu raised on the H200 host: a RuntimeError (not wgpu.GPUError), several lines.
LOST = "Request device failed (3): Validation Error\n\nCaused by:\n    Parent device is lost"


class _Failing(measure.Device):
    stage = "request"

    def __init__(self, *args, **kwargs):
        if self.stage == "request":
            raise RuntimeError(LOST)
        super().__init__(*args, **kwargs)

    def kernel(self, *args, **kwargs):
        if self.stage == "pipeline":
            raise RuntimeError("ComputePipeline(Internal(\"The selected version doesn't support Features(...)\"))")
        return super().kernel(*args, **kwargs)

    def launch(self, *args, **kwargs):
        if self.stage == "dispatch":
            raise ValueError("dispatch refused")
        return super().launch(*args, **kwargs)

    def read(self, *args, **kwargs):
        if self.stage == "read":
            raise MemoryError("mapping failed")
        return super().read(*args, **kwargs)


@pytest.mark.parametrize("stage", ["request", "pipeline", "dispatch", "read"])
def test_an_adapter_failing_anywhere_is_reported_unusable_and_never_chosen(stage, monkeypatch, tmp_path):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    x = ag.tensor(np.arange(7, dtype=np.float32))
    before = (x * 2.0).numpy()
    main_device = ops.gpu()

    good = ag.devices()[0]
    broken = dataclasses.replace(good, name="Broken GL adapter", backend="OpenGL")
    original = measure.Device

    def pick(adapter=None, **kwargs):  # the broken adapter's Device fails at `stage`
        if picking[0] is broken:
            failing = type("Failing", (_Failing,), {"stage": stage})
            return failing(adapter=adapter, **kwargs)
        return original(adapter=adapter, **kwargs)

    picking = [None]
    real_measure = measure.measure_adapter

    def measure_adapter(info):
        picking[0] = info
        return real_measure(info)

    monkeypatch.setattr(measure, "IN_CHILD", False)  # the fake Device lives in this process
    monkeypatch.setattr(measure, "Device", pick)
    monkeypatch.setattr(measure, "measure_adapter", measure_adapter)
    monkeypatch.setattr(measure, "adapter_infos", lambda: [broken, good])

    results = measure.measure_all()
    assert [how.split(":")[0] for _, _, how in results] == ["unusable", "measured"]
    assert results[0][1] is None and results[1][1] is not None and results[1][1].correct
    reason = results[0][2]
    assert "\n" not in reason and len(reason) <= len("unusable: ") + 120
    if stage == "request":
        assert reason == "unusable: Request device failed (3): Validation Error: Parent device is lost"

    lines = measure.table(results)
    row = next(line for line in lines if "Broken GL adapter" in line)
    assert "unusable: " in row and row.lstrip().startswith("[")  # no "+" mark: never the fastest
    assert f"fastest (+): adapter [{good.index}]" in lines[-1]
    # Not cached, and `fastest` (which measures what the cache lacks) picks the good one.
    assert len(measure._load_cache()) == 1
    chosen, why = measure.fastest()
    assert chosen is good and "fastest by measurement" in why

    # The process's main device is the same object and still computes.
    assert ops.gpu() is main_device
    np.testing.assert_array_equal((x * 2.0).numpy(), before)
    np.testing.assert_array_equal((x + 1.0).numpy(), np.arange(7, dtype=np.float32) + 1.0)


def test_a_failing_adapter_alone_makes_fastest_say_so(monkeypatch, tmp_path):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    broken = dataclasses.replace(ag.devices()[0], name="Broken GL adapter", backend="OpenGL")

    def fail(info):
        raise RuntimeError(LOST)

    monkeypatch.setattr(measure, "IN_CHILD", False)
    monkeypatch.setattr(measure, "measure_adapter", fail)
    monkeypatch.setattr(measure, "adapter_infos", lambda: [broken])
    with pytest.raises(measure.GpuError, match="no adapter ran the measurement suite correctly"):
        measure.fastest()


def test_the_suite_runs_in_a_child_process_and_agrees_with_one_here(monkeypatch, tmp_path):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    info = ag.devices()[0]
    child = measure.measure_in_child(info)
    here = measure.measure_adapter(info)
    assert child.key == here.key == measure.adapter_key(info) and child.correct and here.correct
    assert all(0 < v < 60 for v in (child.matmul_seconds, child.copy_seconds, child.dispatch_seconds))
    # Another adapter's key at this index: the child refuses to measure it.
    wrong = dataclasses.replace(info, name="Some Other GPU")
    with pytest.raises(RuntimeError, match=r"adapter \[0\] is not 'Some Other GPU"):
        measure.measure_in_child(wrong)


@pytest.mark.parametrize("script, reason", [
    ("import os; os.abort()", "unusable: the measuring process died of SIGABRT"),
    ("import sys; sys.stderr.write('driver said no\\n'); sys.exit(3)",
     "unusable: the measuring process exited with 3: driver said no"),
    ("import time; time.sleep(30)", "unusable: the suite did not finish in 2 s"),
    ("print('not json')", "unusable: the measuring process exited with 0"),
])
def test_a_child_that_dies_hangs_or_garbles_costs_only_its_row(script, reason, monkeypatch, tmp_path):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    good = ag.devices()[0]
    broken = dataclasses.replace(good, name="Broken GL adapter", backend="OpenGL")
    real_command, real_measure = measure._child_command, measure.measure_in_child
    monkeypatch.setattr(measure, "_child_command",
                        lambda info: [sys.executable, "-c", script] if info is broken else real_command(info))
    monkeypatch.setattr(measure, "measure_in_child",
                        lambda info: real_measure(info, timeout=2.0 if info is broken else measure.CHILD_TIMEOUT))
    monkeypatch.setattr(measure, "adapter_infos", lambda: [broken, good])
    results = measure.measure_all()
    assert [how for _, _, how in results][0] == reason
    assert results[1][2] == "measured" and results[1][1].correct
    assert list(measure._load_cache()) == [measure.adapter_key(good)]
