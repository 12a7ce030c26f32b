"""Signed safetensors checkpoints: round trips, tamper and unsigned rejection, atomicity.

The file layout is checked with plain ``safetensors.numpy`` and a hand-written NanoSign
trailer check, never with the module's own reader alone.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np
import pytest
import safetensors.numpy
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from anygpu.io import checkpoint, nanosign


class FakeTensor:
    """Stands in for a higher layer's Tensor: only ``.numpy()`` is used."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def numpy(self) -> np.ndarray:
        return self._array.copy()


def random_state_dict(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "conv.weight": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "fc.weight": rng.standard_normal((10, 32)).astype(np.float32),
        "fc.bias": rng.standard_normal(10).astype(np.float64),
        "step": np.array(rng.integers(1, 10**12), dtype=np.int64),
        "temperature": np.array(rng.standard_normal(), dtype=np.float32),
        "indices": rng.integers(-(2**31), 2**31 - 1, size=(5, 2), dtype=np.int32),
        "labels": rng.integers(0, 256, size=17, dtype=np.uint8),
        "mask": rng.random((3, 4)) > 0.5,
        "half": rng.standard_normal(6).astype(np.float16),
        "empty": np.zeros((0, 3), dtype=np.float32),
    }


def assert_same_arrays(loaded: dict, expected: dict) -> None:
    assert sorted(loaded) == sorted(expected)
    for name, array in expected.items():
        assert loaded[name].dtype == array.dtype, name
        assert loaded[name].shape == array.shape, name
        np.testing.assert_array_equal(loaded[name], array, err_msg=name)


def flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]


def test_round_trip_keeps_values_dtypes_and_shapes(tmp_path):
    state = random_state_dict(1)
    path = tmp_path / "model.safetensors"
    digest = checkpoint.save(state, path)
    assert_same_arrays(checkpoint.load(path), state)
    assert digest == blake3(path.read_bytes()[:-36]).hexdigest()


def test_loaded_arrays_are_writable(tmp_path):
    path = tmp_path / "model.safetensors"
    checkpoint.save(random_state_dict(2), path)
    loaded = checkpoint.load(path)
    loaded["fc.weight"][0, 0] = 42.0
    assert loaded["fc.weight"][0, 0] == 42.0


def test_tensor_like_values_and_plain_numbers(tmp_path):
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((2, 5)).astype(np.float32)
    path = tmp_path / "model.safetensors"
    checkpoint.save({"w": FakeTensor(weight), "epoch": 7, "lr": 0.25}, path)
    loaded = checkpoint.load(path)
    assert loaded["w"].dtype == np.float32
    np.testing.assert_array_equal(loaded["w"], weight)
    assert loaded["epoch"].shape == () and loaded["epoch"] == 7
    assert loaded["lr"] == 0.25


def test_big_endian_and_non_contiguous_inputs(tmp_path):
    rng = np.random.default_rng(4)
    big_endian = rng.integers(-1000, 1000, size=6).astype(">i4")
    transposed = rng.standard_normal((3, 5)).astype(np.float32).T
    path = tmp_path / "model.safetensors"
    checkpoint.save({"be": big_endian, "t": transposed}, path)
    loaded = checkpoint.load(path)
    assert loaded["be"].dtype == np.int32
    np.testing.assert_array_equal(loaded["be"], big_endian)
    np.testing.assert_array_equal(loaded["t"], transposed)


@settings(max_examples=40, deadline=None)
@given(
    array=hnp.arrays(
        dtype=st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.int8, np.uint16, np.bool_]),
        shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
    )
)
def test_round_trip_any_shape(tmp_path_factory, array):
    path = tmp_path_factory.mktemp("ckpt") / "a.safetensors"
    checkpoint.save({"a": array}, path)
    assert_same_arrays(checkpoint.load(path), {"a": array})


def test_metadata_round_trip(tmp_path):
    path = tmp_path / "model.safetensors"
    metadata = {"epoch": "3", "stratagem": "digits", "note": "ünïcode ✓"}
    checkpoint.save(random_state_dict(5), path, metadata=metadata)
    arrays, loaded_metadata = checkpoint.load_with_metadata(path)
    assert loaded_metadata == metadata
    assert_same_arrays(arrays, random_state_dict(5))

    checkpoint.save(random_state_dict(5), path)
    assert checkpoint.load_with_metadata(path)[1] == {}


def test_file_is_safetensors_plus_nanosign_trailer(tmp_path):
    state = random_state_dict(6)
    path = tmp_path / "model.safetensors"
    checkpoint.save(state, path, metadata={"k": "v"})
    data = path.read_bytes()
    payload, magic, digest = data[:-36], data[-36:-32], data[-32:]
    assert magic == b"NSIG"
    assert digest == blake3(payload).digest()
    assert_same_arrays(safetensors.numpy.load(payload), state)
    (header_len,) = struct.unpack("<Q", payload[:8])
    assert json.loads(payload[8 : 8 + header_len])["__metadata__"] == {"k": "v"}


def test_tampered_file_is_rejected(tmp_path):
    path = tmp_path / "model.safetensors"
    checkpoint.save(random_state_dict(7), path)
    data = path.read_bytes()
    tampered = flip(data, len(data) // 2)
    path.write_bytes(tampered)
    with pytest.raises(nanosign.TamperedError) as info:
        checkpoint.load(path)
    assert info.value.expected == data[-32:].hex()
    assert info.value.actual == blake3(tampered[:-36]).hexdigest()
    assert info.value.expected in str(info.value) and info.value.actual in str(info.value)
    with pytest.raises(nanosign.TamperedError):
        checkpoint.load(path, allow_unsigned=True)


def test_unsigned_file_needs_allow_unsigned(tmp_path):
    state = random_state_dict(8)
    path = tmp_path / "plain.safetensors"
    path.write_bytes(safetensors.numpy.save(state))
    with pytest.raises(ValueError, match="allow_unsigned=True"):
        checkpoint.load(path)
    assert_same_arrays(checkpoint.load(path, allow_unsigned=True), state)


def test_missing_file(tmp_path):
    missing = tmp_path / "missing.safetensors"
    with pytest.raises(FileNotFoundError, match="missing.safetensors"):
        checkpoint.load(missing)


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("content", [b"", b"hello, this is not a checkpoint at all", b"\x10" + b"\x00" * 7 + b"{}"])
def test_garbage_file_is_not_safetensors(tmp_path, signed, content):
    path = tmp_path / "garbage.bin"
    path.write_bytes(nanosign.sign_bytes(content) if signed else content)
    with pytest.raises(ValueError, match="not a safetensors file"):
        checkpoint.load(path, allow_unsigned=True)


def test_dtype_numpy_cannot_hold_is_a_clear_error(tmp_path):
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}).encode()
    header += b" " * (-len(header) % 8)
    payload = struct.pack("<Q", len(header)) + header + b"\x80\x3f\x00\x40"
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(nanosign.sign_bytes(payload))
    with pytest.raises(ValueError, match="BF16"):
        checkpoint.load(path)


@pytest.mark.parametrize(
    ("state", "metadata", "message"),
    [
        ({1: np.ones(2)}, None, "1"),
        ({"w": "not an array"}, None, "'w'"),
        ({"w": object()}, None, "'w'"),
        ({"w": np.array(["a", "b"])}, None, "'w'"),
        ({"w": [[1.0], [2.0, 3.0]]}, None, "'w'"),
        ({"__metadata__": np.ones(2)}, None, "__metadata__"),
        ({"w": np.ones(2)}, {"epoch": 3}, "epoch"),
        ([("w", np.ones(2))], None, "state_dict"),
    ],
)
def test_invalid_input_names_the_key(tmp_path, state, metadata, message):
    path = tmp_path / "model.safetensors"
    with pytest.raises(ValueError, match=message):
        checkpoint.save(state, path, metadata=metadata)
    assert not path.exists()


@pytest.mark.parametrize("failing", ["replace", "fsync"])
def test_failed_save_leaves_previous_checkpoint(tmp_path, monkeypatch, failing):
    path = tmp_path / "model.safetensors"
    checkpoint.save(random_state_dict(9), path)
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("simulated crash")

    monkeypatch.setattr(os, failing, crash)
    with pytest.raises(OSError, match="simulated crash"):
        checkpoint.save(random_state_dict(10), path)
    monkeypatch.undo()

    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.safetensors"]
    assert_same_arrays(checkpoint.load(path), random_state_dict(9))


def test_io_package_exports(tmp_path):
    import anygpu.io as agio

    path = tmp_path / "model.safetensors"
    agio.save({"w": np.arange(3, dtype=np.float32)}, path)
    np.testing.assert_array_equal(agio.load(path)["w"], [0.0, 1.0, 2.0])
    assert agio.TamperedError is nanosign.TamperedError
    assert agio.nanosign.verify(path).ok
