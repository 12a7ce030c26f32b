"""anygpu.bounded_json: the depth scan against a recursive oracle, and the limits of loads/read_file."""

from __future__ import annotations

import json
import os
import random
import threading

import pytest

from anygpu import bounded_json
from anygpu.bounded_json import loads, nesting_depth, read_file

TRICKY = '[]{}"\\/ab\u00e9\u20ac\n\t\U0001f600'


def depth_of(value) -> int:
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    return 0


def random_value(rnd: random.Random, level: int = 0):
    draw = rnd.random()
    if level > 12 or draw < 0.5:
        return rnd.choice([0, -1.5e300, None, True, "".join(rnd.choice(TRICKY) for _ in range(rnd.randint(0, 9)))])
    if draw < 0.75:
        return [random_value(rnd, level + 1) for _ in range(rnd.randint(0, 3))]
    return {"".join(rnd.choice(TRICKY) for _ in range(rnd.randint(0, 6))): random_value(rnd, level + 1)
            for _ in range(rnd.randint(0, 3))}


def test_depth_matches_a_recursive_oracle_on_random_json():
    rnd = random.Random(28)
    for _ in range(2000):
        value = random_value(rnd)
        for text in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=rnd.choice([None, 0, 2]))):
            assert nesting_depth(text) == depth_of(value), text
            assert nesting_depth(text.encode("utf-8")) == depth_of(value)


@pytest.mark.parametrize(("text", "depth"), [
    ("1", 0), ("[]", 1), ("{}", 1), ('"[[[["', 0), ('["]]]]", [1]]', 2), ('"\\\\"', 0),
    ('["\\\\", [[]]]', 3), ('["\\"[[[", 1]', 1), ('["\\\\\\"[", []]', 2), ('{"a\\\\": {"b": [{}]}}', 4),
])
def test_brackets_in_strings_and_escapes(text, depth):
    assert nesting_depth(text) == depth
    assert depth_of(json.loads(text)) == depth


def test_depth_across_scan_chunks(monkeypatch):
    """A string or a nest that straddles the scan's chunk boundary is followed across it."""
    monkeypatch.setattr(bounded_json, "_CHUNK", 7)
    for text in ('["[[[[[[[[[[[[[[", [[[1]]]]', '{"' + "x" * 20 + '[": [[[[[]]]]]}', "[" * 50 + "]" * 50):
        assert nesting_depth(text) == depth_of(json.loads(text))


def test_loads_limits_and_errors():
    assert loads('{"a": [1, 2]}', "f") == {"a": [1, 2]}
    assert loads(b'["\xc3\xa9"]', "f") == ["\u00e9"]
    assert loads("[" * 64 + "]" * 64, "f", max_depth=64) is not None
    with pytest.raises(ValueError, match=r"^f: JSON nested more than 64 levels deep \(the limit\)$"):
        loads("[" * 65 + "]" * 65, "f")
    with pytest.raises(ValueError, match="more than 3 levels"):
        loads('[{"a": [[]]}]', "f", max_depth=3)
    with pytest.raises(ValueError, match="^where: 11 bytes of JSON, more than the limit of 10$"):
        loads('"123456789"', "where", max_bytes=10)
    with pytest.raises(ValueError, match="f: JSON text is not UTF-8"):
        loads(b'["\xff"]', "f")
    with pytest.raises(ValueError, match="f: not valid JSON"):
        loads("[1,", "f")
    assert loads('"\\ud800"', "f") == "\ud800"  # a lone surrogate that JSON escapes is still measured


def test_deep_nest_after_a_large_valid_prefix_is_found():
    prefix = json.dumps({"k%d" % i: [i, "[[[" * 3] for i in range(20_000)})[:-1]
    with pytest.raises(ValueError, match="nested more than 64"):
        loads(prefix + ', "deep": ' + "[" * 1000 + "]" * 1000 + "}", "f")


def test_read_file(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"x": 1}')
    assert read_file(path) == {"x": 1}
    with pytest.raises(ValueError, match=f"{path}: 8 bytes, more than the limit of 4"):
        read_file(path, max_bytes=4)
    path.write_text("[" * 100_000)
    with pytest.raises(ValueError, match=f"{path}: JSON nested more than 64"):
        read_file(path)
    with pytest.raises(FileNotFoundError):
        read_file(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="not a regular file"):
        read_file(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX FIFOs")
def test_read_file_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    outcome = []

    def target():
        try:
            read_file(fifo)
        except ValueError as error:
            outcome.append(str(error))

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and outcome == [f"{fifo}: not a regular file"]
