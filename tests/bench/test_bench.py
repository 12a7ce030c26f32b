"""`anygpu bench`: runs end to end at --quick sizes and writes valid JSON; no timing asserted."""

import argparse
import json
import re

import numpy as np
import pytest

import anygpu as ag
from anygpu import bench
from anygpu.bench.suite import Peers, Row, bench_matmul

pytestmark = pytest.mark.fast


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path / "cache"))


def check_report(path, expected_names):
    report = json.loads(path.read_text())   # strict JSON: no NaN (json.loads accepts it, so check below)
    assert "NaN" not in path.read_text() and "Infinity" not in path.read_text()
    assert report["device"]["adapter"] and report["device"]["timer"] in ("GPU timestamps", "wall clock")
    assert "numpy" in report["peers"]
    rows = {row["name"].split()[0]: row for row in report["rows"]}
    assert set(rows) == expected_names
    for row in report["rows"]:
        if row["anygpu"] is None:
            assert row["note"].startswith("skipped")
            continue
        assert row["anygpu"] > 0 and row["anygpu_rate"] > 0
        assert row["peers"].get("numpy") is None or row["peers"]["numpy"] > 0
        if "max_rel_err" in row["detail"]:
            assert row["detail"]["max_rel_err"] < 1e-3, row
    return report


def test_quick_bench_writes_valid_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert bench.main(["--quick", "--json", str(out), "--sizes", "64,96x80x72", "--no-torch"]) == 0
    report = check_report(out, {"matmul", "conv2d", "add", "softmax", "layer", "small-op", "train"})
    matmuls = [row for row in report["rows"] if row["name"].startswith("matmul")]
    f16_row = "matmul 128x128x128 f16" if ag.gpu().supports("f16") else None
    assert [row["name"] for row in matmuls if row["anygpu"] is not None] == \
        ["matmul 64x64x64", "matmul 96x80x72"] + ([f16_row] if f16_row else [])
    assert all(row["detail"]["config"] for row in matmuls if row["anygpu"] is not None)
    # the row ops name the tuner's kernel too: a register config (r...) or the looped fallback
    rows = [row for row in report["rows"] if row["name"].startswith(("softmax", "layer norm")) and row["anygpu"]]
    assert rows and all(re.fullmatch(r"r\d+x\d+[vs][gt][a-z0-9]*|loop|\d+", row["detail"]["config"]) for row in rows)
    printed = capsys.readouterr().out
    assert "matmul 96x80x72" in printed and "vs torch" in printed


def test_bench_through_the_anygpu_command_with_torch_and_tuning(tmp_path):
    cli = pytest.importorskip("anygpu.cli")
    torch = pytest.importorskip("torch")
    out, plot = tmp_path / "bench.json", tmp_path / "bench.png"
    code = cli.main(["bench", "--quick", "--tune", "--only", "matmul,add", "--sizes", "64",
                     "--json", str(out), "--plot", str(plot)])
    assert code == 0
    report = check_report(out, {"matmul", "add"})
    assert report["peers"]["torch"].startswith(f"PyTorch {torch.__version__}")
    matmul = report["rows"][0]
    assert matmul["peers"]["torch"] > 0 and matmul["ratios"]["torch"] > 0
    assert "simple" in matmul["detail"]["tuning"]      # every candidate's time, or why it was skipped
    if ag.gpu().supports("f16"):
        half = next(row for row in report["rows"] if row["name"].endswith(" f16"))
        # torch fp32 is the ratio column's peer, torch fp16 beside it; both errors against float64
        assert half["peers"]["torch"] > 0 and half["peers"]["torch fp16"] > 0 and half["ratios"]["torch fp16"] > 0
        assert "simple" in half["detail"]["tuning"]
        assert half["detail"]["max_rel_err"] < 2e-3 and half["detail"]["torch_fp16_max_rel_err"] < 2e-3
    assert plot.stat().st_size > 1000
    assert (tmp_path / "cache" / "tuner.json").exists()


@pytest.mark.parametrize("text, sizes", [("256", [(256, 256, 256)]), ("64, 128x32x16", [(64, 64, 64), (128, 32, 16)])])
def test_parse_sizes(text, sizes):
    assert bench.parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["", "12x", "0", "1x2", "axb"])
def test_parse_sizes_refuses_bad_lists(text):
    with pytest.raises(ValueError, match="--sizes"):
        bench.parse_sizes(text)


def test_unknown_benchmark_name_is_a_clear_error(capsys):
    assert bench.main(["--quick", "--only", "matmul,nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_register_adds_the_subcommand():
    parser = argparse.ArgumentParser()
    bench.register(parser.add_subparsers())
    args = parser.parse_args(["bench", "--quick", "--tune", "--json", "x.json", "--plot", "x.png", "--sizes", "64"])
    assert args.func is bench.run and args.quick and args.tune and args.json == "x.json"


class NoHalfDevice:
    def supports(self, dtype):
        return dtype != "f16"


def test_f16_matmul_row_is_skipped_without_shader_f16():
    row = bench_matmul(NoHalfDevice(), Peers(use_torch=False), 64, 64, 64, 0.01, dtype="f16")
    assert row.anygpu is None and row.note == "skipped: the adapter lacks shader-f16"
    assert bench.format_row(row).endswith(row.note)


def test_extra_peers_are_printed_with_their_ratio():
    row = Row("matmul 8x8x8 f16", "GFLOP/s", work=2e12, anygpu=0.5, peers={"numpy": 1.0, "torch": 0.25,
                                                                          "torch fp16": 0.01})
    line = bench.format_row(row)
    assert "x0.50" in line and "torch fp16 200.00 TFLOP/s, x0.02" in line
    assert np.isclose(row.ratio("torch fp16"), 0.02)


def test_ratios_are_peer_time_over_anygpu_time():
    row = Row("matmul 2x2x2", "GFLOP/s", work=2e9, anygpu=0.5, peers={"numpy": 1.0, "torch": None})
    assert row.rate(row.anygpu) == 4.0 and row.ratio("numpy") == 2.0 and row.ratio("torch") is None
    assert Row("overhead", "us/op", anygpu=30e-6).rate(30e-6) == pytest.approx(30.0)


@pytest.mark.parametrize("adapter_type, slow_first, warmed", [
    ("DiscreteGPU", True, True), ("DiscreteGPU", False, False), ("CPU", True, False)])
def test_a_slow_first_call_keeps_a_gpu_busy_before_the_timed_rounds(monkeypatch, adapter_type, slow_first, warmed):
    """time_anygpu: a first call that compiled or tuned (long on the host, GPU idle) is
    followed by WARM_S of calls before timing, on GPU adapters only."""
    import time

    from anygpu.bench import timing

    monkeypatch.setattr(timing, "WARM_S", 0.02)
    monkeypatch.setattr(timing, "seconds_per_run", lambda dev, run, repeats, rounds: 1e-3)
    calls = []

    class Dev:
        stats = {"dispatches": 0}

        def synchronize(self):
            pass

    dev = Dev()
    dev.adapter_type = adapter_type

    def run():
        if not calls and slow_first:
            time.sleep(timing.WARM_AFTER_S * 1.5)
        calls.append(1)
        dev.stats["dispatches"] += 1

    assert timing.time_anygpu(dev, run, budget_s=0.01) == 1e-3
    assert (len(calls) > 2) == warmed  # the first call, the timed one, then the warm-up's


def test_time_host_keeps_the_work_going_for_warm_s_before_timing():
    """warm_s: calls (with a sync every 8) for that long before the timed rounds, which
    then time the same function; without it only the plan's two calls come first."""
    from anygpu.bench.timing import time_host
    calls, syncs = [], []
    seconds = time_host(lambda: calls.append(1), sync=lambda: syncs.append(len(calls)), budget_s=0.001, rounds=1)
    plain = len(calls)
    assert seconds > 0
    calls.clear(), syncs.clear()
    time_host(lambda: calls.append(1), sync=lambda: syncs.append(len(calls)), budget_s=0.001, rounds=1, warm_s=0.02)
    assert len(calls) > plain + 8 and syncs[0] == 8


def test_bench_tune_also_tunes_the_unstreamed_list_when_the_winner_streams(monkeypatch):
    """--tune pre-warms both entries a product may use: the winner's list, and (a stream-K
    winner) the list without stream-K forms that products with epilogues or edges take."""
    from anygpu.ops import matmul_gen, matmul_tune, tuner
    from anygpu.bench.suite import bench_matmul
    streaming = matmul_gen.MatmulConfig.parse("64x64x8_8x8_v4ps3")
    plain = matmul_gen.MatmulConfig.parse("64x64x8_8x8_v4p")
    tuned, stored = [], []

    def tune(dev, tunable, key, **kwargs):
        tuned.append(tunable.name)
        return tuner.TuneResult(streaming if tunable.stream else plain, 1e-3, {"simple": 2e-3})
    monkeypatch.setattr(tuner, "tune", tune)
    monkeypatch.setattr(tuner, "store", lambda dev, tunable, key, result: stored.append((tunable.name, result.choice)))
    row = bench_matmul(ag.gpu(), Peers(use_torch=False), 64, 64, 64, 0.01, tune=True)
    assert tuned == ["matmul", "matmul unstreamed"]
    assert stored == [("matmul", streaming), ("matmul unstreamed", plain)]
    assert row.detail["max_rel_err"] < 1e-4
    assert matmul_tune.UNSTREAMED["f32"].name == "matmul unstreamed"
