"""Hostile files: `anygpu.load` and NanoSign read regular files only, within what the header declares.

Each case runs under a watchdog thread that fails the test instead of hanging forever
(a FIFO nobody writes to blocks an ordinary open()).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading

import numpy as np
import pytest
import safetensors.numpy

from anygpu.io import checkpoint, nanosign

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")


def within_seconds(seconds, action):
    """Run action() in a daemon thread; fail if it has not returned (or raised) in time."""
    outcome = {}

    def target():
        try:
            outcome["value"] = action()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            outcome["error"] = error

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still blocked after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def safetensors_payload(header: dict, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


@pytest.mark.parametrize("reader", [
    lambda p: checkpoint.load(p, allow_unsigned=True), nanosign.verify, nanosign.hash, nanosign.sign, nanosign.strip,
])
def test_symlink_to_dev_zero_is_refused_at_once(tmp_path, reader):
    link = tmp_path / "model.safetensors"
    link.symlink_to("/dev/zero")
    with pytest.raises(ValueError, match="character device; expected a regular file"):
        within_seconds(10, lambda: reader(link))
    assert link.is_symlink() and os.readlink(link) == "/dev/zero"


@pytest.mark.parametrize("reader", [
    lambda p: checkpoint.load(p, allow_unsigned=True), nanosign.verify, nanosign.hash, nanosign.sign, nanosign.strip,
])
def test_fifo_is_refused_without_blocking(tmp_path, reader):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO; expected a regular file"):
        within_seconds(10, lambda: reader(fifo))
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors"]


def test_symlink_to_a_regular_checkpoint_is_fine(tmp_path):
    checkpoint.save({"w": np.arange(3, dtype=np.float32)}, tmp_path / "real.safetensors")
    (tmp_path / "link.safetensors").symlink_to(tmp_path / "real.safetensors")
    np.testing.assert_array_equal(checkpoint.load(tmp_path / "link.safetensors")["w"], [0, 1, 2])


def test_folder_is_refused(tmp_path):
    with pytest.raises(IsADirectoryError):
        checkpoint.load(tmp_path)


@pytest.mark.parametrize(
    ("header", "data", "message"),
    [
        # a length field far beyond the file: never allocated, never read
        (None, b"", "header declares"),
        ({"w": {"dtype": "F32", "shape": [1 << 40], "data_offsets": [0, 4 << 40]}}, b"\0" * 16, "declares"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "declares 16 bytes"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 16, "declares 8 bytes"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 8]}}, b"\0" * 8, "needs 16 bytes"),
        ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
          "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, "gap or overlap"),
        ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8, "gap or overlap"),
        ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}, b"", "shape"),
        ({"w": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}}, b"\0" * 8, "shape"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, "data_offsets"),
        ({"w": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unknown dtype"),
        ({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, "exactly dtype"),
        ({"w": [1, 2]}, b"", "exactly dtype"),
        ({"__metadata__": {"epoch": 3}}, b"", "__metadata__"),
    ],
)
@pytest.mark.parametrize("signed", [True, False])
def test_lying_or_truncated_headers_are_refused(tmp_path, header, data, message, signed):
    if header is None:
        payload = struct.pack("<Q", 1 << 62) + b"{}      "
    else:
        payload = safetensors_payload(header, data)
    path = tmp_path / "bad.safetensors"
    path.write_bytes(nanosign.sign_bytes(payload) if signed else payload)
    with pytest.raises(ValueError, match=message):
        checkpoint.load(path, allow_unsigned=True)


@pytest.mark.parametrize("cut", [1, 8, 40, 100])
def test_truncated_signed_checkpoint(tmp_path, cut):
    path = tmp_path / "model.safetensors"
    checkpoint.save({"w": np.arange(10, dtype=np.float32), "b": np.ones(3)}, path)
    data = path.read_bytes()
    path.write_bytes(data[:-cut])
    with pytest.raises(ValueError):
        checkpoint.load(path, allow_unsigned=True)


def test_reads_no_more_than_the_file_declares(tmp_path, monkeypatch):
    """A header whose length field is huge must not make load allocate that much."""
    path = tmp_path / "huge.safetensors"
    path.write_bytes(nanosign.sign_bytes(struct.pack("<Q", 50 << 30) + b"{}"))
    allocations = []
    real = bytearray

    class Recording(real):
        def __new__(cls, *args):
            if args and isinstance(args[0], int):
                allocations.append(args[0])
            return real.__new__(cls, *args)

    monkeypatch.setattr(checkpoint, "bytearray", Recording, raising=False)
    with pytest.raises(ValueError, match="header declares"):
        checkpoint.load(path)
    assert all(size <= 8 for size in allocations)


def test_written_files_are_valid_for_the_reference_reader(tmp_path):
    state = {"b": np.arange(3, dtype=np.uint8), "a": np.ones((2, 2), np.float64), "c": np.zeros(0, np.float32),
             "s": np.array(2.5, np.float32)}
    path = tmp_path / "m.safetensors"
    checkpoint.save(state, path, metadata={"z": "1", "a": "2"})
    reference = safetensors.numpy.load(nanosign.strip_bytes(path.read_bytes()))
    for name, array in state.items():
        np.testing.assert_array_equal(reference[name], array)
        assert reference[name].dtype == array.dtype and reference[name].shape == array.shape


def test_saving_is_byte_deterministic_across_processes(tmp_path):
    """Metadata keys in random order (hash seeds differ per process) still give one file."""
    import subprocess

    script = (
        "import sys, numpy as np\n"
        "from anygpu.io import checkpoint\n"
        "meta = {k: str(i) for i, k in enumerate(['zeta', 'alpha', 'mid', 'beta', 'omega', 'k1', 'k2'])}\n"
        "checkpoint.save({'w': np.arange(6, dtype=np.float32), 'b': np.ones(2, np.int64),"
        " 'z': np.zeros(1, np.uint8)}, sys.argv[1], metadata=meta)\n"
    )
    outputs = []
    for seed in ("1", "2", "3"):
        target = tmp_path / f"run{seed}.safetensors"
        env = {**os.environ, "PYTHONHASHSEED": seed}
        subprocess.run([sys.executable, "-c", script, str(target)], env=env, check=True)
        outputs.append(target.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    inserted_otherwise = tmp_path / "here.safetensors"
    checkpoint.save({"z": np.zeros(1, np.uint8), "b": np.ones(2, np.int64), "w": np.arange(6, dtype=np.float32)},
                    inserted_otherwise,
                    metadata={k: str(i) for i, k in reversed(list(enumerate(
                        ["zeta", "alpha", "mid", "beta", "omega", "k1", "k2"])))})
    assert inserted_otherwise.read_bytes() == outputs[0]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_top_level_anygpu_load_refuses_fifo_and_devices(tmp_path, kind):
    import anygpu as ag

    path = tmp_path / "model.safetensors"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(ValueError, match="expected a regular file"):
        within_seconds(10, lambda: ag.load(path, allow_unsigned=True))


def test_read_idx_refuses_fifo_and_devices(tmp_path):
    from anygpu.io.datasets import DataError, read_idx

    fifo = tmp_path / "train-images-idx3-ubyte"
    os.mkfifo(fifo)
    zero = tmp_path / "t10k-images-idx3-ubyte"
    zero.symlink_to("/dev/zero")
    for path in (fifo, zero):
        with pytest.raises(DataError, match="expected a regular file"):
            within_seconds(10, lambda: read_idx(path))


# --------------------------------------------------------------------------- deep JSON (issue 28)
# Python's json recurses once per level: 100,000 levels is a RecursionError (or, with a raised
# recursion limit, a crash of the C stack). Every JSON read of a file goes through
# anygpu.bounded_json, which measures the depth first and refuses with a ValueError.

DEPTH = 100_000
DEEP = {
    "arrays": "[" * DEPTH + "]" * DEPTH,
    "objects": '{"a":' * DEPTH + "1" + "}" * DEPTH,
    "unclosed": "[" * DEPTH,
}
TOO_DEEP = "nested more than 64 levels deep"


def deep_headers(deep: str) -> dict[str, bytes]:
    """safetensors header texts with `deep` at the top, as a tensor entry, in __metadata__."""
    return {
        "top": deep.encode(),
        "tensor": ('{"w": ' + deep + "}").encode(),
        "metadata": ('{"__metadata__": {"k": ' + deep + "}}").encode(),
    }


@pytest.mark.parametrize("shape", sorted(DEEP))
@pytest.mark.parametrize("where", ["top", "tensor", "metadata"])
@pytest.mark.parametrize("signed", [True, False])
def test_deep_safetensors_header_is_a_value_error(tmp_path, shape, where, signed):
    import anygpu as ag

    text = deep_headers(DEEP[shape])[where]
    text += b" " * (-len(text) % 8)
    payload = struct.pack("<Q", len(text)) + text
    path = tmp_path / "deep.safetensors"
    path.write_bytes(nanosign.sign_bytes(payload) if signed else payload)
    for load in (lambda: checkpoint.load(path, allow_unsigned=True), lambda: ag.load(path, allow_unsigned=True)):
        with pytest.raises(ValueError, match=f"{path}.*{TOO_DEEP}") as caught:
            load()
        assert not isinstance(caught.value, nanosign.TamperedError)  # the signature matches: the content is refused


def test_deep_header_with_a_raised_recursion_limit_does_not_crash(tmp_path):
    """A program that raised sys.setrecursionlimit would let json recurse until the C stack
    overflows (a segfault); the depth is checked before json runs, so it is still a ValueError."""
    import subprocess

    path = tmp_path / "deep.safetensors"
    text = DEEP["arrays"].encode() * 10
    path.write_bytes(nanosign.sign_bytes(struct.pack("<Q", len(text)) + text))
    code = ("import sys; sys.setrecursionlimit(10**7)\n"
            "from anygpu.io import checkpoint\n"
            f"try: checkpoint.load({str(path)!r})\n"
            "except ValueError as error: print('refused:', error)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "refused:" in done.stdout and TOO_DEEP in done.stdout, done


@pytest.mark.parametrize("shape", sorted(DEEP))
def test_deep_structure_entry_of_anygpu_save_is_a_value_error(tmp_path, shape):
    import anygpu as ag
    from anygpu.io import serialization

    path = tmp_path / "deep.ckpt"
    checkpoint.save({"w": np.zeros(2, np.float32)}, path, metadata={
        serialization.FORMAT_KEY: serialization.FORMAT, serialization.STRUCTURE_KEY: DEEP[shape]})
    with pytest.raises(ValueError, match=f"load: {path}: the structure entry: JSON nested more than 300 levels deep"):
        ag.load(path)


def test_anygpu_save_refuses_what_load_would_refuse(tmp_path):
    """save and load agree on the structure's depth limit: 99 nested dicts round-trip, 101 do not."""
    import anygpu as ag

    def nest(levels):
        obj = {"leaf": ag.tensor([1.0, 2.0])}
        for _ in range(levels):
            obj = {"child": obj}
        return obj

    ag.save(nest(98), tmp_path / "ok.ckpt")
    loaded = ag.load(tmp_path / "ok.ckpt")
    for _ in range(98):
        loaded = loaded["child"]
    assert loaded["leaf"].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="deeper than load reads back"):
        ag.save(nest(101), tmp_path / "deep.ckpt")
    assert not (tmp_path / "deep.ckpt").exists()


@pytest.mark.parametrize("shape", sorted(DEEP))
@pytest.mark.parametrize("key", ["architecture", "input_shape", "preprocess", "classes"])
def test_deep_model_file_entry_is_a_model_file_error(tmp_path, shape, key):
    from anygpu.train import modelfile

    metadata = modelfile.classifier_metadata({"name": "digits_cnn", "classes": 10}, (1, 8, 8), [str(k) for k in range(10)],
                                             [0.5], [0.25])
    metadata.update({"format": modelfile.MODEL_FORMAT, "stratagem": "digits", key: DEEP[shape]})
    path = tmp_path / "model.safetensors"
    checkpoint.save({"w": np.zeros(2, np.float32)}, path, metadata=metadata)
    with pytest.raises(modelfile.ModelFileError, match=f"{path}: the '{key}' entry: JSON {TOO_DEEP}"):
        modelfile.read(path)


@pytest.mark.parametrize("shape", sorted(DEEP))
@pytest.mark.parametrize("key", ["settings", "history", "curve", "rng", "scheduler"])
def test_deep_training_checkpoint_entry_is_a_value_error(tmp_path, shape, key):
    from anygpu.train import loop

    with pytest.raises(ValueError, match=f"--resume: .*the '{key}' entry: JSON {TOO_DEEP}.*damaged"):
        loop._header_json({key: DEEP[shape]}, key, tmp_path / "checkpoint.safetensors")


@pytest.mark.parametrize("shape", sorted(DEEP))
def test_deep_tuner_cache_is_ignored_with_a_warning_and_rebuilt(tmp_path, dev, shape):
    from anygpu.ops import matmul_tune, tuner
    from anygpu.ops.matmul_gen import Problem

    path = tmp_path / tuner.CACHE_FILE
    path.write_text(DEEP[shape])
    with pytest.warns(RuntimeWarning, match=f"ignoring the tuning cache .*{TOO_DEEP}.*rebuilt"):
        assert tuner.load_cache(path) == {}
    problem = Problem(1, 64, 64, 64)
    choice = matmul_tune.heuristic(dev, problem)
    assert tuner.store(dev, matmul_tune.TUNABLE, problem, tuner.TuneResult(choice, 1e-3), path)
    rebuilt = json.loads(path.read_text())  # the damaged file is replaced whole, atomically
    assert list(rebuilt["entries"]) == [tuner.cache_key(dev, matmul_tune.TUNABLE, problem)]
    assert tuner.load_cache(path)[tuner.cache_key(dev, matmul_tune.TUNABLE, problem)]["choice"] == \
        matmul_tune.TUNABLE.label(choice)


def test_oversized_tuner_cache_is_ignored_with_a_warning(tmp_path):
    from anygpu.ops import cache_file, tuner

    path = tmp_path / tuner.CACHE_FILE
    path.write_bytes(b" " * (cache_file.MAX_CACHE_BYTES + 1))
    with pytest.warns(RuntimeWarning, match="more than the limit"):
        assert tuner.load_cache(path) == {}


@pytest.mark.parametrize("shape", [*sorted(DEEP), "fifo"])
def test_deep_or_fifo_adapter_cache_is_measured_again(tmp_path, monkeypatch, shape):
    from anygpu.runtime import measure

    monkeypatch.setenv("ANYGPU_CACHE_DIR", str(tmp_path))
    if shape == "fifo":
        os.mkfifo(tmp_path / measure.CACHE_FILE)
    else:
        (tmp_path / measure.CACHE_FILE).write_text(DEEP[shape])
    assert within_seconds(10, measure._load_cache) == {}
