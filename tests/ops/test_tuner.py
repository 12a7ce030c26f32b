"""The generic tuner (ops/tuner.py): float64 checks reject wrong candidates, the disk
cache is read back and damaged entries are ignored, and the conv / softmax tunables'
candidates compute the right numbers."""

import json

import numpy as np
import pytest

from anygpu.ops import conv_tune, softmax_tune, tuner


class _Scale(tuner.Tunable):
    """A toy op: out = 2x. Candidate factors other than 2.0 compute wrong numbers."""

    name = "test_scale"
    tune_from = {"gpu": 0, "cpu": 0}

    def __init__(self, candidates=(2.0, 2.001, 2.5)):
        self._candidates = list(candidates)
        self.runs = []

    def bucket(self, p):
        return f"{p[0]}-n{tuner.pow2(p[1])}"

    def work(self, p):
        return p[1]

    def candidates(self, dev, p):
        return list(self._candidates)

    def label(self, c):
        return repr(c)

    def parse(self, label):
        return float(label)

    def inputs(self, p, rng):
        return [rng.standard_normal(p[1]).astype(np.float32)]

    def run(self, dev, c, p, buffers):
        self.runs.append(c)
        return dev.scale(buffers[0], c)

    def reference(self, p, arrays):
        return 2.0 * arrays[0].astype(np.float64)

    def small(self, p):
        return (p[0], 37)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("ANYGPU_AUTOTUNE", raising=False)
    monkeypatch.setenv("ANYGPU_TUNE_BUDGET", "inf")  # these tests tune a bucket completely at once
    return tmp_path / tuner.CACHE_FILE


def test_tune_skips_candidates_that_fail_the_float64_check(dev, cache):
    result = tuner.tune(dev, _Scale(), ("f32", 4096), rounds=1)
    assert result.choice == 2.0
    assert result.timings["2.5"] == "wrong result on the small float64 check"
    assert result.timings["2.001"] == "wrong result on the small float64 check"  # 5e-4 relative
    assert isinstance(result.timings["2.0"], float)


def test_choose_tunes_once_then_reads_the_cache(dev, cache, monkeypatch):
    op = _Scale(candidates=(2.0, 2.0 + 0.0))
    problem = ("f32", 1000 + 7)
    assert tuner.choose(dev, op, problem) == 2.0
    entries = json.loads(cache.read_text())["entries"]
    key = tuner.cache_key(dev, op, problem)
    assert entries[key]["choice"] == "2.0" and "f32" in key
    tuner.forget_choices(dev)
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: pytest.fail("tuned again despite the cache"))
    assert tuner.choose(dev, op, problem) == 2.0


def test_damaged_cache_entries_are_ignored(dev, cache, monkeypatch):
    op = _Scale(candidates=(2.0, 3.0))
    problem = ("f32", 2048)
    key = tuner.cache_key(dev, op, problem)
    tuned = []
    monkeypatch.setattr(tuner, "tune", lambda dev, op, problem: tuned.append(problem) or
                        tuner.TuneResult(2.0, 1e-3))
    for bad_entry in ({"choice": 7}, {"choice": "no-such-candidate"}, "not a dict", None):
        cache.write_text(json.dumps({"format": tuner.CACHE_FORMAT, "entries": {key: bad_entry}}))
        tuner.forget_choices(dev)
        assert tuner.choose(dev, op, problem) == 2.0
    for text in ("{not json", json.dumps({"format": 999, "entries": {}}), json.dumps([1, 2])):
        cache.write_text(text)
        assert tuner.load_cache() == {}
    # An entry naming an offered candidate passes the float64 check before it is used:
    # 3.0 computes wrong numbers, so the op is tuned again.
    cache.write_text(json.dumps({"format": tuner.CACHE_FORMAT, "entries": {key: {"choice": "3.0"}}}))
    tuner.forget_choices(dev)
    tuned.clear()
    assert tuner.choose(dev, op, problem) == 2.0 and tuned == [problem]
    # A right one is used as it is.
    right = _Scale(candidates=(2.0, 2.0 + 1e-7))
    cache.write_text(json.dumps({"format": tuner.CACHE_FORMAT,
                                 "entries": {key: {"choice": right.label(2.0 + 1e-7)}}}))
    tuner.forget_choices(dev)
    tuned.clear()
    assert tuner.choose(dev, right, problem) == 2.0 + 1e-7 and tuned == []


def test_autotune_off_takes_the_fallback_without_reading_the_cache(dev, cache, monkeypatch):
    op = _Scale(candidates=(2.0, 3.0))
    problem = ("f32", 4096)
    cache.write_text(json.dumps({"format": tuner.CACHE_FORMAT,
                                 "entries": {tuner.cache_key(dev, op, problem): {"choice": "3.0"}}}))
    monkeypatch.setenv("ANYGPU_AUTOTUNE", "0")
    assert tuner.choose(dev, op, problem) == 2.0


def test_deterministic_mode_chooses_without_timing_and_keeps_the_cached_choice(dev, cache, monkeypatch):
    """Under use_deterministic_algorithms(True) no candidate is timed (a choice made while
    tuning differs from run to run, and so do the bits of kernels that sum in other orders):
    a cached choice is used, else the untuned one; off again, the bucket is tuned."""
    from anygpu.ops import determinism

    op = _Scale(candidates=(2.0, 2.0 + 1e-7))
    problem, other = ("f32", 8192), ("f32", 16384)
    cache.write_text(json.dumps({"format": tuner.CACHE_FORMAT,
                                 "entries": {tuner.cache_key(dev, op, problem): {"choice": op.label(2.0 + 1e-7)}}}))
    timed = []
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: timed.append(a[2]) or tuner.TuneResult(2.0 + 1e-7, 1e-3))
    tuner.forget_choices(dev)
    determinism.use_deterministic_algorithms(True)
    try:
        assert tuner.choose(dev, op, problem) == 2.0 + 1e-7  # the cached choice
        assert tuner.choose(dev, op, other) == 2.0 and timed == []  # untuned: the fallback, nothing timed
    finally:
        determinism.use_deterministic_algorithms(False)
    assert tuner.choose(dev, op, other) == 2.0 + 1e-7 and timed == [other]


def _conv_problems():
    return {"conv2d": ("f32", 2, 3, 9, 9, 37, 3, 3, (1, 1), (1, 1), (1, 1), 1),
            "conv2d_grad_weight": ("f32", 2, 8, 9, 9, 37, 3, 3, (1, 1), (1, 1), (1, 1), 1),
            "conv_transpose2d": ("f32", 2, 5, 5, 5, 37, 9, 9, 3, 3, (2, 2), (1, 1), (1, 1), 1)}


@pytest.mark.parametrize("kind", sorted(conv_tune.TUNABLES))
def test_conv_candidates_pass_the_float64_check(dev, kind):
    op = conv_tune.TUNABLES[kind]
    problem = _conv_problems()[kind]
    found = op.candidates(dev, problem)
    assert found[0] == conv_tune.choose_tiles(*op.gemm(problem)[:2])  # the heuristic comes first
    # Each variant compiles for about a second on lavapipe: the fallback and two others.
    for tiles in [found[0], found[1], found[-1]]:
        assert tuner.verify_small(dev, op, tiles, problem), op.label(tiles)
        assert conv_tune._tiles_parse(op.label(tiles)) == tiles


def test_conv_tune_picks_a_correct_candidate(dev, cache):
    op = conv_tune.TUNABLES["conv2d"]
    problem = ("f32", 2, 4, 10, 10, 33, 3, 3, (1, 1), (1, 1), (1, 1), 1)
    found = op.candidates(dev, problem)
    result = tuner.tune(dev, op, problem, candidates=found[:2], rounds=1)
    assert result.choice in found[:2]
    # Both passed the checks: timed, or (on a loaded machine) dropped as slow -- never as wrong.
    assert all(isinstance(v, float) or v.startswith("slow:") for v in result.timings.values()), result.timings


@pytest.mark.parametrize("kind", sorted(softmax_tune.TUNABLES))
def test_softmax_sizes_pass_the_float64_check(dev, kind):
    op = softmax_tune.TUNABLES[kind]
    problem = ("f32", 7, 300)
    found = op.candidates(dev, problem)
    loops = [c for c in found if isinstance(c, int)]
    assert found[0] == 256 and sorted(loops) == [32, 64, 128, 256]
    registers = [c for c in found if not isinstance(c, int)]  # ops/row_gen.py configs that hold the row
    assert registers and all(c.serves(300) for c in registers)
    for candidate in loops + registers[:2]:
        assert tuner.verify_small(dev, op, candidate, problem), candidate
        assert op.parse(op.label(candidate)) == candidate
