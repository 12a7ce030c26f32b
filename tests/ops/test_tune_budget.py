"""Incremental tuning (ops/tuner.py, issue 28): a call of a bucket being tuned spends at most
its budget, runs with the best so far (the untuned pick until that was timed), and the
winner is stored and used once every candidate was timed; the share of wall time is kept;
shipped defaults seed the untuned pick; a progress line shows; `anygpu tune -- CMD` warms
the cache. Timings come from a stubbed clock and a stubbed timer, never from real kernels."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from anygpu.cli import main
from anygpu.ops import tuner

LABELS = [f"c{i}" for i in range(8)]


class _Stub(tuner.Tunable):
    """An op whose candidates (strings) all compute 2x right; their speed is set by the test."""

    name = "test_stub"
    tune_from = {"gpu": 0, "cpu": 0}

    def __init__(self, seed="c0"):
        self.seed = seed
        self.last = None

    def bucket(self, p):
        return f"{p[0]}-n{tuner.pow2(p[1])}"

    def work(self, p):
        return p[1]

    def candidates(self, dev, p):
        return list(LABELS)

    def untuned(self, dev, p, fallback):
        return self.seed

    def label(self, c):
        return c

    def parse(self, label):
        return label

    def inputs(self, p, rng):
        return [rng.standard_normal(p[1]).astype(np.float32)]

    def run(self, dev, c, p, buffers):
        self.last = c
        return dev.scale(buffers[0], 2.0)

    def reference(self, p, arrays):
        return 2.0 * arrays[0].astype(np.float64)

    def small(self, p):
        return (p[0], 37)


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


@pytest.fixture
def stubbed(dev, tmp_path, monkeypatch):
    """(clock, {label: seconds per run}, {label: clock seconds to time it}) with the timer stubbed."""
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ANYGPU_AUTOTUNE", raising=False)
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "0.2")
    monkeypatch.setenv("ANYGPU_TUNE_SHARE", "1")
    clock = _Clock()
    monkeypatch.setattr(tuner, "_clock", clock)
    monkeypatch.setattr(tuner, "_PACE", tuner._Pace())
    monkeypatch.setattr(tuner, "_PROGRESS", tuner._Progress())
    monkeypatch.setattr(tuner, "_DEFAULTS", [{}])
    speeds = {label: 4.0 for label in LABELS}
    costs = {label: 0.07 for label in LABELS}
    timed = []

    def time_candidate(dev, run, best_seconds, budget_s, rounds):
        run()
        label = dev_stub_last[0].last
        timed.append(label)
        clock.now += costs[label]
        return speeds[label]
    dev_stub_last = [None]
    monkeypatch.setattr(tuner, "time_candidate", time_candidate)
    tuner.forget_choices(dev)
    state = tuner._state(dev)
    state.pending.clear()
    state.timed.clear()
    state.expected.clear()
    yield clock, speeds, costs, timed, dev_stub_last
    state.pending.clear()
    tuner.forget_choices(dev)


def _cached(dev, op, problem):
    return tuner.load_cache().get(tuner.cache_key(dev, op, problem))


def test_each_call_spends_at_most_the_budget_and_runs_the_best_so_far(dev, stubbed):
    clock, speeds, costs, timed, last = stubbed
    op = _Stub(seed="c3")
    last[0] = op
    speeds.update(c0=5.0, c3=3.0, c5=1.0)
    problem = ("f32", 1000)
    picks, spent = [], []
    for _ in range(6):
        before_calls = tuner.provisional_calls()
        start = clock.now
        picks.append(tuner.choose(dev, op, problem))
        spent.append(clock.now - start)
        if tuner.provisional_calls() > before_calls:  # not complete: nothing stored yet
            assert _cached(dev, op, problem) is None
    assert all(s <= 0.2 + 1e-9 for s in spent), spent
    # Two candidates of 0.07 s fit a 0.2 s budget (a third would not): the fallback and the
    # seed first, then in list order; the untuned pick c3 runs until something beats it.
    assert timed == ["c0", "c3", "c1", "c2", "c4", "c5", "c6", "c7"]
    assert picks == ["c3", "c3", "c5", "c5", "c5", "c5"]
    assert spent[4:] == [0.0, 0.0]  # tuned: no more timing
    entry = _cached(dev, op, problem)
    assert entry["choice"] == "c5" and entry["seconds"] == 1.0
    # Another problem of the same bucket takes the stored winner at once.
    assert tuner.choose(dev, op, ("f32", 1001)) == "c5" and spent[-1] == 0.0


def test_a_candidate_over_the_budget_is_timed_alone(dev, stubbed):
    clock, speeds, costs, timed, last = stubbed
    op = _Stub()
    last[0] = op
    costs.update({label: 0.5 for label in LABELS})
    for calls in range(1, 9):
        start = clock.now
        tuner.choose(dev, op, ("f32", 512))
        assert clock.now - start == pytest.approx(0.5) and len(timed) == calls
    assert _cached(dev, op, ("f32", 512))["choice"] == "c0"


def test_tuning_keeps_to_its_share_of_wall_time(dev, stubbed, monkeypatch):
    clock, speeds, costs, timed, last = stubbed
    monkeypatch.setenv("ANYGPU_TUNE_SHARE", "0.25")
    op = _Stub()
    last[0] = op
    started = clock.now
    for n in range(40):
        tuner.choose(dev, op, ("f32", 2048 + n * 4096))  # a new bucket each time: always tuning
        clock.now += 0.1  # the step's own work
        elapsed = clock.now - started
        assert tuner._PACE.spent <= 0.25 * elapsed + 0.2 + 0.07 + 1e-9
    assert tuner._PACE.spent > 0.25 * (clock.now - started) - 0.3  # and it does use its share


def test_budget_zero_never_tunes_and_autotune_off_ignores_defaults(dev, stubbed, monkeypatch):
    clock, speeds, costs, timed, last = stubbed
    op = _Stub(seed="c2")
    last[0] = op
    problem = ("f32", 300)
    monkeypatch.setattr(tuner, "_DEFAULTS", [{tuner.defaults_key(dev, op, problem): {"choice": "c6"}}])
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "0")
    assert tuner.choose(dev, op, problem) == "c6"  # the shipped default, checked, no timing
    assert timed == [] and _cached(dev, op, problem) is None
    monkeypatch.setenv("ANYGPU_AUTOTUNE", "0")
    assert tuner.choose(dev, op, problem) == "c2"  # the size heuristic only
    monkeypatch.setenv("ANYGPU_AUTOTUNE", "1")
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "nonsense")
    with pytest.raises(ValueError, match="ANYGPU_TUNE_BUDGET"):
        tuner.choose(dev, op, ("f32", 9000))


def test_a_shipped_default_seeds_the_tuning_and_a_bad_one_is_ignored(dev, stubbed, monkeypatch):
    clock, speeds, costs, timed, last = stubbed
    op = _Stub(seed="c1")
    last[0] = op
    speeds.update(c4=2.0)
    problem = ("f32", 700)
    monkeypatch.setattr(tuner, "_DEFAULTS", [{tuner.defaults_key(dev, op, problem): {"choice": "c4"}}])
    assert tuner.choose(dev, op, problem) == "c4"
    assert timed[:2] == ["c0", "c4"]  # the fallback, then the seed
    other = ("f32", 5000)
    monkeypatch.setattr(tuner, "_DEFAULTS", [{tuner.defaults_key(dev, op, other): {"choice": "no-such"}}])
    assert tuner.choose(dev, op, other) == "c1"  # unknown label: the heuristic
    # A default tuned on an adapter of this very name counts as tuned: no timing.
    third = ("f32", 20000)
    monkeypatch.setattr(tuner, "_DEFAULTS", [{tuner.defaults_key(dev, op, third): {
        "choice": "c6", "from": dev.adapter_name}}])
    del timed[:]
    assert tuner.choose(dev, op, third) == "c6" and timed == []
    # ANYGPU_TUNE_DEFAULTS=0 ignores the shipped file.
    monkeypatch.setenv("ANYGPU_TUNE_DEFAULTS", "0")
    tuner.forget_choices(dev)
    assert tuner.choose(dev, op, third) == "c1" and timed[:2] == ["c0", "c1"]


def test_long_tuning_prints_a_progress_line(dev, stubbed, monkeypatch, capsys):
    clock, speeds, costs, timed, last = stubbed
    monkeypatch.setattr(tuner, "PROGRESS_DELAY", 0.1)
    op = _Stub()
    last[0] = op
    for _ in range(4):
        tuner.choose(dev, op, ("f32", 64))
    err = capsys.readouterr().err
    assert "anygpu: tuning kernels" in err and "8/8" in err, err


def test_the_full_budget_tunes_a_bucket_at_once(dev, stubbed, monkeypatch):
    clock, speeds, costs, timed, last = stubbed
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "inf")
    op = _Stub()
    last[0] = op
    speeds.update(c7=0.5)
    assert tuner.choose(dev, op, ("f32", 96)) == "c7"
    assert len(timed) == 8 and _cached(dev, op, ("f32", 96))["choice"] == "c7"


WARM = """
import anygpu as ag
from anygpu.ops import matmul_tune
for op in (*matmul_tune.TUNABLES.values(), *matmul_tune.UNSTREAMED.values()):
    op.tune_from = {"cpu": 0, "gpu": 0}   # a tiny product is worth tuning here
a = ag.randn(64, 72)
print(float((a @ a.T).sum().item()))
"""


def test_anygpu_tune_warms_the_cache_for_a_script(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "0")  # what `anygpu tune` overrides
    assert main(["tune", "--", sys.executable, "-c", WARM]) == 0
    err = capsys.readouterr().err
    entries = json.loads((tmp_path / tuner.CACHE_FILE).read_text())["entries"]
    assert [k for k in entries if k.startswith("matmul v")], entries
    assert "1 new" in err or "2 new" in err, err
    # The command's exit code comes back; no command is a usage error.
    assert main(["tune", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert main(["tune"]) == 2
    assert "expected a command" in capsys.readouterr().err


def test_anygpu_tune_runs_from_the_command_line(tmp_path):
    env = dict(os.environ, ANYGPU_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "anygpu", "tune", "--", sys.executable, "-c", "print('hi')"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "hi", done.stderr
    assert "anygpu tune:" in done.stderr


def test_tunables_of_one_family_share_their_timings(dev, stubbed):
    """matmul's streamed and unstreamed lists run the same products: what one timed, the
    other does not time again."""
    clock, speeds, costs, timed, last = stubbed
    first, second = _Stub(), _Stub()
    second.name = "test_stub unstreamed"
    first.family = second.family = "test_stub"
    last[0] = first
    speeds.update(c2=1.0)
    for _ in range(4):
        tuner.choose(dev, first, ("f32", 4000))
    assert len(timed) == 8 and _cached(dev, first, ("f32", 4000))["choice"] == "c2"
    last[0] = second
    start = clock.now
    assert tuner.choose(dev, second, ("f32", 4000)) == "c2"  # complete at its first call
    assert len(timed) == 8 and clock.now == start
    assert _cached(dev, second, ("f32", 4000))["choice"] == "c2"
