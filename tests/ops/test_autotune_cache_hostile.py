"""Any autotune-cache content leads to a valid kernel: damaged entries are dropped, the op never fails."""

import json
import os
import threading

import numpy as np
import pytest

from anygpu.ops import autotune
from anygpu.ops.matmul_gen import Problem


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch, dev):
    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ANYGPU_AUTOTUNE", raising=False)
    autotune.forget_choices(dev)
    yield
    autotune.forget_choices(dev)


DAMAGED = [
    {"config": "128x128x8_0x8_v4p"},  # the ZeroDivisionError of issue 13
    {"config": "0x0x0_0x0_v4"},
    {"config": "128x128x8_8x0_v1"},
    {"config": "96x128x8_8x8_v4p"},  # not a power of two
    {"config": "128x128x8_12x8_v4"},
    {"config": "64x64x2_8x8_v4"},  # tile_k not a multiple of 4
    {"config": "9" * 400 + "x128x8_8x8_v4"},
    {"config": 7}, {"config": None}, {"config": ["simple"]}, {}, "simple", 5, None, [1, 2],
]


@pytest.mark.parametrize("entry", DAMAGED, ids=[repr(e)[:30] for e in DAMAGED])
def test_damaged_entry_never_fails_the_matmul(dev, rng, monkeypatch, tmp_path, entry):
    monkeypatch.setattr(autotune, "TUNE_FROM", {"cpu": 1 << 60, "gpu": 1 << 60})  # no tuning: the fallback path
    monkeypatch.setattr(autotune, "SIMPLE_BELOW", {"cpu": 0, "gpu": 0})
    m, n, k = 64, 64, 64
    problem = Problem(1, m, n, k)
    path = tmp_path / "cache" / autotune.CACHE_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"format": autotune.CACHE_FORMAT,
                                "entries": {autotune.cache_key(dev, problem): entry, "other": {"config": "simple"}}}))
    assert autotune.cache_key(dev, problem) not in autotune.load_cache(path)
    assert "other" in autotune.load_cache(path)  # good entries survive
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = dev.read(dev.matmul(dev.upload(a), dev.upload(b), m, n, k)).reshape(m, n)
    np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_cached_config_that_fails_the_small_check_is_not_trusted(dev, monkeypatch, tmp_path):
    monkeypatch.setattr(autotune, "TUNE_FROM", {"cpu": 1 << 60, "gpu": 1 << 60})
    problem = Problem(1, 300, 260, 270)
    path = tmp_path / "cache" / autotune.CACHE_FILE
    path.parent.mkdir()
    path.write_text(json.dumps({"format": autotune.CACHE_FORMAT,
                                "entries": {autotune.cache_key(dev, problem): {"config": "32x32x16_4x4_v4"}}}))
    monkeypatch.setattr(autotune, "verify_small", lambda *args: False)
    assert autotune.choose(dev, problem) == autotune.heuristic(dev, problem)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_cache_file_that_is_a_fifo_does_not_block(dev, tmp_path):
    path = tmp_path / "cache" / autotune.CACHE_FILE
    path.parent.mkdir()
    os.mkfifo(path)
    found = []
    thread = threading.Thread(target=lambda: found.append(autotune.load_cache(path)), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and found == [{}]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_generic_tuner_cache_fifo_and_deep_json(tmp_path):
    from anygpu.ops import tuner  # shares autotune's file checks (ops/cache_file.py)

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
