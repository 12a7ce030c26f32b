"""Any tuning-cache content leads to a valid kernel: damaged entries are ignored, the op never fails."""

import json
import os
import threading

import numpy as np
import pytest

from anygpu.ops import matmul_tune, tuner
from anygpu.ops.matmul_gen import Problem


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch, dev):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ANYGPU_AUTOTUNE", raising=False)
    tuner.forget_choices(dev)
    yield
    tuner.forget_choices(dev)


DAMAGED = [
    {"choice": "128x128x8_0x8_v4p"},  # the ZeroDivisionError of issue 13
    {"choice": "0x0x0_0x0_v4"},
    {"choice": "128x128x8_8x0_v1"},
    {"choice": "96x128x8_8x8_v4p"},  # not a power of two
    {"choice": "128x128x8_12x8_v4"},
    {"choice": "64x64x2_8x8_v4"},  # tile_k not a multiple of 4
    {"choice": "9" * 400 + "x128x8_8x8_v4"},
    {"choice": "1024x1024x64_4x4_v4"},  # parses, but over every device's limits
    {"choice": 7}, {"choice": None}, {"choice": ["simple"]}, {}, "simple", 5, None, [1, 2],
    {"config": "64x64x8_8x8_v4p"},  # matmul_autotune.json's old entry shape
]


@pytest.mark.parametrize("entry", DAMAGED, ids=[repr(e)[:30] for e in DAMAGED])
def test_damaged_entry_never_fails_the_matmul(dev, rng, monkeypatch, tmp_path, entry):
    op = matmul_tune.TUNABLE
    monkeypatch.setattr(op, "tune_from", {"cpu": 1 << 60, "gpu": 1 << 60})  # no tuning: the untuned path
    monkeypatch.setattr(matmul_tune, "SIMPLE_BELOW", {"cpu": 0, "gpu": 0})
    m, n, k = 64, 64, 64
    problem = Problem(1, m, n, k)
    key = tuner.cache_key(dev, op, matmul_tune.key(problem))
    path = tmp_path / "cache" / tuner.CACHE_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"format": tuner.CACHE_FORMAT, "entries": {key: entry, "other": {"choice": "simple"}}}))
    assert "other" in tuner.load_cache(path)  # good entries survive
    # The entry is not used: the untuned pick (the heuristic's family member) is.
    assert matmul_tune.choose(dev, problem) == matmul_tune.heuristic(dev, problem) is not None
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = dev.read(dev.matmul(dev.upload(a), dev.upload(b), m, n, k)).reshape(m, n)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_cached_config_that_fails_the_small_check_is_not_trusted(dev, monkeypatch, tmp_path):
    op = matmul_tune.TUNABLE
    monkeypatch.setattr(op, "tune_from", {"cpu": 1 << 60, "gpu": 1 << 60})
    problem = Problem(1, 300, 260, 270)
    pool = matmul_tune.CPU_CANDIDATES if dev.adapter_type == "CPU" else matmul_tune.GPU_CANDIDATES
    # a candidate other than the untuned pick (on the H200 the last one is the heuristic's)
    cached = next(c for c in reversed(pool) if c != matmul_tune.heuristic(dev, problem))
    path = tmp_path / "cache" / tuner.CACHE_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"format": tuner.CACHE_FORMAT, "entries": {
        tuner.cache_key(dev, op, matmul_tune.key(problem)): {"choice": cached.name}}}))
    checked, verdicts = [], [False]
    monkeypatch.setattr(tuner, "verify_small", lambda *args: checked.append(args[2]) or verdicts[-1])
    assert matmul_tune.choose(dev, problem) == matmul_tune.heuristic(dev, problem)
    verdicts.append(True)  # the same entry, passing its check, is used
    tuner.forget_choices(dev)
    assert matmul_tune.choose(dev, problem) == cached
    assert checked == [cached, cached]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_cache_file_that_is_a_fifo_does_not_block(dev, tmp_path):
    path = tmp_path / "cache" / tuner.CACHE_FILE
    path.parent.mkdir()
    os.mkfifo(path)
    found = []
    thread = threading.Thread(target=lambda: found.append(tuner.load_cache(path)), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and found == [{}]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_tuner_cache_fifo_and_deep_json(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    found = []
    thread = threading.Thread(target=lambda: found.append(tuner.load_cache(fifo)), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and found == [{}]
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)
    assert tuner.load_cache(deep) == {}
