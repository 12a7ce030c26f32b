"""Checkpoints: safetensors files signed with NanoSign, written atomically. Never pickle.

``save`` serializes a state dict in the safetensors format (byte-deterministic: sorted
header keys, fixed tensor order), appends a NanoSign trailer and writes the file
atomically. ``load`` opens regular files only, checks that the header's declared sizes add
up to the file's size, reads exactly that many bytes, verifies the trailer over them and
returns NumPy arrays. Files are written and read by this module; ``safetensors`` (the
package) only checks them in the tests.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping
from typing import Any, Union

import numpy as np
from blake3 import blake3

from anygpu import bounded_json
from anygpu.io import nanosign

__all__ = ["save", "load", "load_with_metadata"]

PathLike = Union[str, "os.PathLike[str]"]

# The dtypes that safetensors.numpy can both write and read back (names ignore byte order).
_SUPPORTED_DTYPES = (
    "bool", "uint8", "int8", "uint16", "int16", "uint32", "int32",
    "uint64", "int64", "float16", "float32", "float64", "complex64",
)
# safetensors keeps its own header entry under this name; a tensor may not use it.
_METADATA_KEY = "__metadata__"


def _to_array(key: str, value: Any) -> np.ndarray:
    """Turn one state-dict value into a contiguous little-endian array, or say why not."""
    if hasattr(value, "numpy") and not isinstance(value, (np.ndarray, np.generic)):
        value = value.numpy()
    if not isinstance(value, (np.ndarray, np.generic, int, float, list, tuple)):
        raise ValueError(
            f"save: state_dict[{key!r}] is a {type(value).__name__}; "
            "expected a numpy array or an object with a .numpy() method"
        )
    try:
        array = np.asarray(value)
    except ValueError as error:
        raise ValueError(f"save: state_dict[{key!r}] is not a rectangular array ({error})") from None
    if array.dtype.name not in _SUPPORTED_DTYPES:
        raise ValueError(
            f"save: state_dict[{key!r}] has dtype {array.dtype}; expected one of {', '.join(_SUPPORTED_DTYPES)}"
        )
    # safetensors stores little-endian, C-ordered data. (np.ascontiguousarray would turn a
    # 0-d array into shape (1,), so copy with order="C" instead.)
    return array.astype(array.dtype.newbyteorder("<"), order="C", copy=False)


def _check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise ValueError(f"save: metadata is a {type(metadata).__name__}; expected a dict of str to str")
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise ValueError(
                f"save: metadata[{key!r}] = {value!r} ({type(key).__name__} -> {type(value).__name__}); "
                "expected str keys and str values"
            )
    return dict(metadata)


def save(state_dict: Mapping[str, Any], path: PathLike, metadata: Mapping[str, str] | None = None) -> str:
    """Write ``state_dict`` to ``path`` as a NanoSign-signed safetensors file.

    ``state_dict`` maps names to NumPy arrays (any shape, 0-d included; dtype kept:
    float32 stays float32, int64 stays int64) or to objects with a ``.numpy()`` method,
    such as a Tensor. ``metadata`` (str -> str) goes in the safetensors header. The file
    is replaced atomically: a crash leaves either the old file or the new one.
    Returns the hex BLAKE3 hash of the safetensors payload (what ``verify`` reports).
    """
    if not isinstance(state_dict, Mapping):
        raise ValueError(f"save: state_dict is a {type(state_dict).__name__}; expected a dict of str to arrays")
    arrays: dict[str, np.ndarray] = {}
    for key, value in state_dict.items():
        if not isinstance(key, str):
            raise ValueError(f"save: state_dict key {key!r} is a {type(key).__name__}; expected str")
        if key == _METADATA_KEY:
            raise ValueError(f"save: state_dict key {key!r} is reserved by safetensors")
        arrays[key] = _to_array(key, value)

    payload = _serialize(arrays, _check_metadata(metadata))
    nanosign.atomic_write_bytes(path, nanosign.sign_bytes(payload))
    return nanosign.hash_bytes(payload)


# safetensors' names of the dtypes we write and read, and NumPy's.
_DTYPE_NAMES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16", "uint32": "U32",
    "int32": "I32", "uint64": "U64", "int64": "I64", "float16": "F16", "float32": "F32",
    "float64": "F64", "complex64": "C64",
}
_NUMPY_DTYPES = {tag: np.dtype(name).newbyteorder("<") for name, tag in _DTYPE_NAMES.items()}
# Tags safetensors defines that NumPy has no type for (loading them is a clear error).
_FOREIGN_DTYPES = ("BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4", "C128")
# As safetensors itself: a header above 100 MB is refused before it is read.
_MAX_HEADER_SIZE = 100_000_000


def _serialize(arrays: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None) -> bytes:
    """The safetensors bytes of ``arrays``, the same bytes for the same input on every run.

    safetensors' own writer emits the metadata keys in hash order, which changes between
    processes; here the header is JSON with sorted keys and no spaces, and the tensors are
    laid out by descending item size, then name (so every tensor stays aligned).
    """
    order = sorted(arrays, key=lambda name: (-arrays[name].dtype.itemsize, name))
    header: dict[str, Any] = {}
    if metadata:
        header[_METADATA_KEY] = dict(sorted(metadata.items()))
    offset = 0
    for name in order:
        array = arrays[name]
        header[name] = {"dtype": _DTYPE_NAMES[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    parts = [struct.pack("<Q", len(text)), text]
    parts.extend(arrays[name].tobytes(order="C") for name in order)
    return b"".join(parts)


class _Entry:
    """One tensor as the header declares it: dtype, shape, byte range in the data section."""

    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name: str, dtype: np.dtype, shape: tuple[int, ...], begin: int, end: int):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, shape, begin, end


def _parse_header(text: bytes, where: str) -> tuple[dict[str, str], list[_Entry], int]:
    """Check a safetensors header; return (metadata, tensors, data section length).

    Every field is checked: a header that parses but lies (offsets that overlap, leave
    gaps, or disagree with dtype x shape) is refused, never trusted to size a read.
    """
    def bad(reason: str) -> ValueError:
        return ValueError(f"load: {where} is not a safetensors file ({reason})")

    try:  # bounded: a header of "[[[[..." is refused, never a RecursionError
        header = bounded_json.loads(text, "header", max_bytes=_MAX_HEADER_SIZE)
    except ValueError as error:
        raise bad(str(error)) from None
    if not isinstance(header, dict):
        raise bad(f"header is a JSON {type(header).__name__}, expected an object")
    metadata = header.pop(_METADATA_KEY, None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise bad("__metadata__ is not an object of strings")
    entries = []
    for name, info in header.items():
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise bad(f"tensor {name!r} needs exactly dtype, shape and data_offsets")
        tag, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
        if tag in _FOREIGN_DTYPES:
            raise ValueError(f"load: {where} holds a tensor of dtype {tag}, which NumPy cannot represent")
        if tag not in _NUMPY_DTYPES:
            raise bad(f"tensor {name!r} has unknown dtype {tag!r}")
        if not isinstance(shape, list) or not all(type(side) is int and side >= 0 for side in shape):
            raise bad(f"tensor {name!r} has shape {shape!r}, expected a list of non-negative integers")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(type(at) is int and at >= 0 for at in offsets) or offsets[0] > offsets[1]):
            raise bad(f"tensor {name!r} has data_offsets {offsets!r}, expected [begin, end] with 0 <= begin <= end")
        dtype = _NUMPY_DTYPES[tag]
        expected = math.prod(shape) * dtype.itemsize
        if offsets[1] - offsets[0] != expected:
            raise bad(f"tensor {name!r} of {tag} {shape} needs {expected} bytes, its offsets span {offsets[1] - offsets[0]}")
        entries.append(_Entry(name, dtype, tuple(shape), offsets[0], offsets[1]))
    position = 0
    for entry in sorted(entries, key=lambda e: (e.begin, e.end)):
        if entry.begin != position:
            raise bad(f"tensor {entry.name!r} starts at byte {entry.begin}, expected {position} (gap or overlap)")
        position = entry.end
    return metadata, entries, position


def _read_exactly(handle: Any, count: int, where: str) -> bytearray:
    buffer = bytearray(count)
    view = memoryview(buffer)
    filled = 0
    while filled < count:
        got = handle.readinto(view[filled:])
        if not got:
            raise ValueError(f"load: {where} shrank while being read ({filled} of {count} bytes)")
        filled += got
    return buffer


def load_with_metadata(
    path: PathLike, allow_unsigned: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a checkpoint written by ``save``; return (arrays by name, header metadata).

    Only a regular file is read (a FIFO or device is refused before any read), and only
    as many bytes as its header declares, after checking that the header's sizes add up to
    the file's size. Raises ``nanosign.TamperedError`` when the signature does not match,
    ``ValueError`` when the file is unsigned (unless ``allow_unsigned=True``), is not a
    safetensors file or not a regular file, and ``FileNotFoundError`` when there is no
    file at ``path``.
    """
    where = os.fspath(path)
    with nanosign.open_regular(path, "load") as handle:
        payload_len, stored = nanosign._locate_payload(handle)
        if stored is None and not allow_unsigned:
            raise ValueError(
                f"load: {where} has no NanoSign signature; "
                "pass allow_unsigned=True to load it without an integrity check"
            )
        try:
            if payload_len < 8:
                raise ValueError(f"load: {where} is not a safetensors file ({payload_len} bytes, too short)")
            (header_len,) = struct.unpack("<Q", _read_exactly(handle, 8, where))
            if header_len > min(payload_len - 8, _MAX_HEADER_SIZE):
                raise ValueError(f"load: {where} is not a safetensors file (header declares {header_len} bytes, "
                                 f"the file holds {payload_len - 8} after the length field)")
            header_bytes = bytes(_read_exactly(handle, header_len, where))
            metadata, entries, data_len = _parse_header(header_bytes, where)
            if 8 + header_len + data_len != payload_len:
                raise ValueError(f"load: {where} is not a safetensors file (header declares {data_len} bytes of "
                                 f"tensor data, the file holds {payload_len - 8 - header_len})")
        except ValueError:
            if stored is not None:  # damage after signing is the likelier story: say so
                handle.seek(0)
                actual = nanosign._hash_stream(handle, payload_len)
                if actual != stored:
                    raise nanosign.TamperedError(stored.hex(), actual.hex(), path) from None
            raise
        data = _read_exactly(handle, data_len, where)

    # The bytes parsed are the bytes hashed: no second read that a writer could race.
    digest = blake3(struct.pack("<Q", header_len))
    digest.update(header_bytes)
    digest.update(data)
    actual = digest.digest()
    if stored is not None and actual != stored:
        raise nanosign.TamperedError(stored.hex(), actual.hex(), path)

    # Arrays are writable views of one buffer (callers update weights in place); a tensor
    # whose offset does not suit its item size is copied to aligned memory.
    arrays: dict[str, np.ndarray] = {}
    for entry in entries:
        count = entry.end - entry.begin
        array = np.frombuffer(data, dtype=entry.dtype, count=count // entry.dtype.itemsize, offset=entry.begin)
        if entry.begin % entry.dtype.itemsize:
            array = array.copy()
        arrays[entry.name] = array.reshape(entry.shape)
    return arrays, metadata


def load(path: PathLike, allow_unsigned: bool = False) -> dict[str, np.ndarray]:
    """Read a checkpoint written by ``save``; return its arrays by name.

    Verifies the NanoSign trailer first (see ``load_with_metadata`` for the errors).
    """
    arrays, _ = load_with_metadata(path, allow_unsigned=allow_unsigned)
    return arrays
