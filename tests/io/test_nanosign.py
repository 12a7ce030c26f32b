"""NanoSign v1 against a reference written here from the format's definition.

The reference takes only the BLAKE3 function from the ``blake3`` package; the trailer
layout (payload | b"NSIG" | 32-byte digest) is spelled out by hand below.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import stat
import sys

import numpy as np
import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from anygpu import nanosign_cli
from anygpu.io import nanosign

# Published BLAKE3 test vectors: they pin the hash function itself, not just our use of it.
BLAKE3_EMPTY = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
BLAKE3_ABC = "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"


def reference_sign(payload: bytes) -> bytes:
    return payload + b"NSIG" + blake3(payload).digest()


def reference_status(data: bytes) -> str:
    if len(data) < 36 or data[len(data) - 36 : len(data) - 32] != b"NSIG":
        return "unsigned"
    return "verified" if blake3(data[: len(data) - 36]).digest() == data[len(data) - 32 :] else "failed"


def random_payload(seed: int, size: int) -> bytes:
    """Random bytes that cannot contain the magic, so a test alone decides where it goes."""
    return random_bytes(seed, size).replace(b"NSIG", b"nsig")


def random_bytes(seed: int, size: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()


def flip(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0x01]) + data[position + 1 :]


def files_in(folder) -> list[str]:
    return sorted(os.listdir(folder))


# ----------------------------------------------------------------------------- bytes


def test_known_answers():
    assert nanosign.hash_bytes(b"") == BLAKE3_EMPTY
    assert nanosign.hash_bytes(b"abc") == BLAKE3_ABC
    assert nanosign.sign_bytes(b"") == b"NSIG" + bytes.fromhex(BLAKE3_EMPTY)
    assert nanosign.sign_bytes(b"abc") == b"abcNSIG" + bytes.fromhex(BLAKE3_ABC)
    assert nanosign.TRAILER_SIZE == 36


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_sign_bytes_matches_reference(payload):
    signed = nanosign.sign_bytes(payload)
    if reference_status(payload) == "unsigned":
        assert signed == reference_sign(payload)
    assert reference_status(signed) == "verified"
    assert nanosign.verify_bytes(signed).ok


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_reference_signature_verifies(payload):
    signed = reference_sign(payload)
    result = nanosign.verify_bytes(signed)
    assert result.status == "verified"
    assert result.expected == result.actual == blake3(payload).hexdigest()
    assert nanosign.strip_bytes(signed) == payload
    assert nanosign.hash_bytes(signed) == blake3(payload).hexdigest()


def test_accepts_bytearray_and_memoryview():
    signed = reference_sign(b"weights")
    assert nanosign.verify_bytes(bytearray(signed)).ok
    assert nanosign.verify_bytes(memoryview(signed)).ok
    assert nanosign.sign_bytes(bytearray(b"weights")) == signed


def test_every_flipped_byte_is_detected():
    signed = reference_sign(random_payload(1, 64))
    for position in range(len(signed)):
        expected = "unsigned" if len(signed) - 36 <= position < len(signed) - 32 else "failed"
        result = nanosign.verify_bytes(flip(signed, position))
        assert result.status == expected == reference_status(flip(signed, position)), position
        assert not result.ok


def test_failed_reports_both_hashes():
    payload = random_payload(2, 100)
    tampered = flip(reference_sign(payload), 50)
    result = nanosign.verify_bytes(tampered)
    assert result.status == "failed"
    assert result.expected == blake3(payload).hexdigest()
    assert result.actual == blake3(tampered[:-36]).hexdigest()
    assert str(result) == f"FAILED expected {result.expected} actual {result.actual}"


def test_unsigned_data():
    payload = random_payload(3, 1000)
    result = nanosign.verify_bytes(payload)
    assert result.status == "unsigned"
    assert result.expected is None
    assert result.actual == blake3(payload).hexdigest()
    assert nanosign.strip_bytes(payload) == payload
    assert str(result) == "unsigned"


@pytest.mark.parametrize("data", [b"", b"NSIG", b"NSIG" + b"\x00" * 31, b"x" * 35])
def test_shorter_than_trailer_is_unsigned(data):
    assert nanosign.verify_bytes(data).status == "unsigned"
    assert nanosign.strip_bytes(data) == data


def test_exactly_a_trailer_is_a_signed_empty_payload():
    assert nanosign.verify_bytes(b"NSIG" + bytes.fromhex(BLAKE3_EMPTY)).ok
    assert nanosign.verify_bytes(b"NSIG" + b"\x00" * 32).status == "failed"


@pytest.mark.parametrize("cut", [1, 5, 32, 35, 36, 37])
def test_truncated_signed_data_does_not_verify(cut):
    truncated = reference_sign(random_payload(4, 80))[:-cut]
    result = nanosign.verify_bytes(truncated)
    assert result.status == reference_status(truncated) == "unsigned"


def test_resigning_replaces_the_trailer():
    payload = random_payload(5, 70)
    once = nanosign.sign_bytes(payload)
    assert nanosign.sign_bytes(once) == once
    edited = flip(once, 10)
    resigned = nanosign.sign_bytes(edited)
    assert len(resigned) == len(payload) + 36
    assert resigned == reference_sign(edited[:-36])


def test_verify_result_value_object():
    result = nanosign.VerifyResult("verified", "ab", "ab")
    assert result.ok and str(result) == "verified ab"
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.status = "failed"
    with pytest.raises(ValueError, match="status"):
        nanosign.VerifyResult("ok", None, None)


def test_tampered_error_message():
    error = nanosign.TamperedError("aa" * 32, "bb" * 32, "model.safetensors")
    assert isinstance(error, ValueError)
    assert "aa" * 32 in str(error) and "bb" * 32 in str(error) and "model.safetensors" in str(error)
    assert (error.expected, error.actual, error.path) == ("aa" * 32, "bb" * 32, "model.safetensors")


# ----------------------------------------------------------------------------- files


@pytest.fixture(params=[None, 7], ids=["default-chunks", "7-byte-chunks"])
def chunk_size(request, monkeypatch):
    """Run file tests also with tiny chunks so that streaming crosses many chunk edges."""
    if request.param is not None:
        monkeypatch.setattr(nanosign, "_CHUNK_SIZE", request.param)
    return request.param


def test_file_signed_by_reference_verifies(tmp_path, chunk_size):
    payload = random_payload(6, 3000)
    path = tmp_path / "w.bin"
    path.write_bytes(reference_sign(payload))
    result = nanosign.verify(path)
    assert result.status == "verified" and result.actual == blake3(payload).hexdigest()
    assert nanosign.hash(path) == blake3(payload).hexdigest()


def test_file_signed_by_us_verifies_with_reference(tmp_path, chunk_size):
    payload = random_payload(7, 3000)
    path = tmp_path / "w.bin"
    path.write_bytes(payload)
    assert nanosign.sign(path) == blake3(payload).hexdigest()
    assert path.read_bytes() == reference_sign(payload)
    assert files_in(tmp_path) == ["w.bin"]


def test_hash_is_the_same_before_and_after_signing(tmp_path, chunk_size):
    path = tmp_path / "w.bin"
    path.write_bytes(random_payload(8, 500))
    before = nanosign.hash(path)
    nanosign.sign(path)
    assert nanosign.hash(path) == before == blake3(random_payload(8, 500)).hexdigest()


def test_file_flipped_byte_fails(tmp_path, chunk_size):
    payload = random_payload(9, 2000)
    path = tmp_path / "w.bin"
    for position in (0, 999, 1999, 2000 + 36 - 1):
        path.write_bytes(flip(reference_sign(payload), position))
        assert nanosign.verify(path).status == "failed", position


def test_file_unsigned_and_truncated(tmp_path, chunk_size):
    payload = random_payload(10, 200)
    path = tmp_path / "w.bin"
    path.write_bytes(payload)
    assert nanosign.verify(path) == nanosign.VerifyResult("unsigned", None, blake3(payload).hexdigest())
    path.write_bytes(reference_sign(payload)[:-1])
    assert nanosign.verify(path).status == "unsigned"
    path.write_bytes(b"NSIG")
    assert nanosign.verify(path).status == "unsigned"


def test_file_resign_replaces_not_stacks(tmp_path, chunk_size):
    payload = random_payload(11, 400)
    path = tmp_path / "w.bin"
    path.write_bytes(payload)
    nanosign.sign(path)
    nanosign.sign(path)
    assert path.read_bytes() == reference_sign(payload)
    path.write_bytes(flip(reference_sign(payload), 3))
    nanosign.sign(path)
    assert path.read_bytes() == reference_sign(flip(payload, 3))


def test_empty_file(tmp_path):
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert nanosign.verify(path).status == "unsigned"
    assert nanosign.hash(path) == BLAKE3_EMPTY
    assert nanosign.sign(path) == BLAKE3_EMPTY
    assert path.read_bytes() == b"NSIG" + bytes.fromhex(BLAKE3_EMPTY)
    assert nanosign.verify(path).ok
    assert nanosign.strip(path).ok
    assert path.read_bytes() == b""


def test_strip_file(tmp_path, chunk_size):
    payload = random_payload(12, 1500)
    path = tmp_path / "w.bin"
    path.write_bytes(reference_sign(payload))
    assert nanosign.strip(path).status == "verified"
    assert path.read_bytes() == payload
    assert nanosign.strip(path).status == "unsigned"
    assert path.read_bytes() == payload
    path.write_bytes(flip(reference_sign(payload), 0))
    result = nanosign.strip(path)
    assert result.status == "failed" and result.expected == blake3(payload).hexdigest()
    assert path.read_bytes() == flip(payload, 0)
    assert files_in(tmp_path) == ["w.bin"]


def test_missing_file_raises_with_path(tmp_path):
    missing = tmp_path / "nope.bin"
    for operation in (nanosign.verify, nanosign.sign, nanosign.strip, nanosign.hash):
        with pytest.raises(FileNotFoundError) as info:
            operation(missing)
        assert str(missing) in str(info.value)
    assert files_in(tmp_path) == []


# ------------------------------------------------------------------ atomic writes


def test_atomic_write_creates_and_replaces(tmp_path):
    path = tmp_path / "out.bin"
    nanosign.atomic_write_bytes(path, b"first")
    nanosign.atomic_write_bytes(str(path), b"second")
    assert path.read_bytes() == b"second"
    assert files_in(tmp_path) == ["out.bin"]


@pytest.mark.parametrize("failing", ["replace", "fsync", "write"])
def test_atomic_write_failure_keeps_original(tmp_path, monkeypatch, failing):
    path = tmp_path / "out.bin"
    path.write_bytes(b"original")

    def boom(*args, **kwargs):
        raise OSError("simulated crash")

    if failing == "write":
        # Fail inside the with-block, after part of the data has gone to the temp file.
        with pytest.raises(OSError, match="simulated crash"):
            with nanosign.atomic_writer(path) as handle:
                handle.write(b"half")
                boom()
    else:
        monkeypatch.setattr(os, failing, boom)
        with pytest.raises(OSError, match="simulated crash"):
            nanosign.atomic_write_bytes(path, b"new content")
    assert path.read_bytes() == b"original"
    assert files_in(tmp_path) == ["out.bin"]


def test_sign_failure_keeps_original(tmp_path, monkeypatch):
    path = tmp_path / "w.bin"
    path.write_bytes(b"payload")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        nanosign.sign(path)
    assert path.read_bytes() == b"payload"
    assert files_in(tmp_path) == ["w.bin"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permission bits")
def test_atomic_write_keeps_permissions(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"payload")
    os.chmod(path, 0o640)
    nanosign.sign(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


@pytest.mark.skipif(sys.platform == "win32", reason="symlinks need privileges on Windows")
def test_sign_through_symlink_keeps_the_link(tmp_path):
    target = tmp_path / "real.bin"
    target.write_bytes(b"payload")
    link = tmp_path / "link.bin"
    link.symlink_to(target)
    nanosign.sign(link)
    assert link.is_symlink()
    assert target.read_bytes() == reference_sign(b"payload")


# ------------------------------------------------------------------------ command line


def run_cli(capsys, *argv):
    code = nanosign_cli.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_verify_exit_codes(tmp_path, capsys):
    payload = random_payload(13, 300)
    path = tmp_path / "w.bin"
    digest = blake3(payload).hexdigest()

    path.write_bytes(reference_sign(payload))
    assert run_cli(capsys, "verify", str(path)) == (0, f"verified {digest}\n", "")

    tampered = flip(reference_sign(payload), 7)
    path.write_bytes(tampered)
    actual = blake3(tampered[:-36]).hexdigest()
    assert run_cli(capsys, "verify", str(path)) == (1, f"FAILED expected {digest} actual {actual}\n", "")

    path.write_bytes(payload)
    assert run_cli(capsys, "verify", str(path)) == (2, "unsigned\n", "")


def test_cli_sign_hash_strip(tmp_path, capsys):
    payload = random_payload(14, 300)
    digest = blake3(payload).hexdigest()
    path = tmp_path / "w.bin"
    path.write_bytes(payload)

    assert run_cli(capsys, "hash", str(path)) == (0, f"{digest}\n", "")
    assert run_cli(capsys, "sign", str(path)) == (0, f"{digest}\n", "")
    assert reference_status(path.read_bytes()) == "verified"
    assert run_cli(capsys, "hash", str(path)) == (0, f"{digest}\n", "")

    code, out, _ = run_cli(capsys, "strip", str(path))
    assert code == 0 and digest in out
    assert path.read_bytes() == payload

    code, out, _ = run_cli(capsys, "strip", str(path))
    assert code == 2 and "unsigned" in out
    assert path.read_bytes() == payload

    path.write_bytes(flip(reference_sign(payload), 0))
    code, out, _ = run_cli(capsys, "strip", str(path))
    assert code == 1 and "FAILED" in out
    assert path.read_bytes() == flip(payload, 0)


@pytest.mark.parametrize("command", ["sign", "verify", "strip", "hash"])
def test_cli_missing_file(tmp_path, capsys, command):
    missing = tmp_path / "missing.bin"
    code, out, err = run_cli(capsys, command, str(missing))
    assert code == 2
    assert out == ""
    assert err == f"anygpu {command}: cannot read {missing}: No such file or directory\n"
    assert files_in(tmp_path) == []


def test_cli_directory_is_an_error(tmp_path, capsys):
    code, out, err = run_cli(capsys, "verify", str(tmp_path))
    assert code == 2
    assert err.startswith(f"anygpu verify: cannot read {tmp_path}: ")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_register_on_a_foreign_parser(tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="anygpu")
    subparsers = parser.add_subparsers(dest="command", required=True)
    subparsers.add_parser("info")
    nanosign_cli.register(subparsers)

    path = tmp_path / "w.bin"
    path.write_bytes(reference_sign(b"abc"))
    args = parser.parse_args(["verify", str(path)])
    assert args.func(args) == 0
    assert capsys.readouterr().out == f"verified {BLAKE3_ABC}\n"
