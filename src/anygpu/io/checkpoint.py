"""Checkpoints: safetensors files signed with NanoSign, written atomically. Never pickle.

``save`` serializes a state dict with safetensors, appends a NanoSign trailer and writes
the file atomically. ``load`` reads the file, verifies the trailer, strips it (safetensors
parsers reject trailing bytes) and parses the rest into NumPy arrays.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping
from typing import Any, Union

import numpy as np
import safetensors
import safetensors.numpy

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

    payload = safetensors.numpy.save(arrays, metadata=_check_metadata(metadata))
    nanosign.atomic_write_bytes(path, nanosign.sign_bytes(payload))
    return nanosign.hash_bytes(payload)


def _read_header_metadata(payload: bytes) -> dict[str, str]:
    """The ``__metadata__`` entry of a safetensors header that has already parsed."""
    (header_len,) = struct.unpack("<Q", payload[:8])
    header = json.loads(payload[8 : 8 + header_len])
    return dict(header.get(_METADATA_KEY) or {})


def load_with_metadata(
    path: PathLike, allow_unsigned: bool = False
) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Read a checkpoint written by ``save``; return (arrays by name, header metadata).

    Raises ``nanosign.TamperedError`` when the signature does not match, ``ValueError``
    when the file is unsigned (unless ``allow_unsigned=True``) or is not a safetensors
    file, and ``FileNotFoundError`` when there is no file at ``path``.
    """
    with open(path, "rb") as handle:
        data = handle.read()

    result = nanosign.verify_bytes(data)
    if result.status == "failed":
        raise nanosign.TamperedError(result.expected, result.actual, path)
    if result.status == "unsigned" and not allow_unsigned:
        raise ValueError(
            f"load: {os.fspath(path)} has no NanoSign signature; "
            "pass allow_unsigned=True to load it without an integrity check"
        )

    payload = nanosign.strip_bytes(data)
    del data
    try:
        arrays = safetensors.numpy.load(payload)
        metadata = _read_header_metadata(payload)
    except safetensors.SafetensorError as error:
        raise ValueError(f"load: {os.fspath(path)} is not a safetensors file ({error})") from None
    except KeyError as error:
        raise ValueError(
            f"load: {os.fspath(path)} holds a tensor of dtype {error.args[0]}, which NumPy cannot represent"
        ) from None
    # Arrays may be views of an immutable buffer; callers expect to update weights in place.
    arrays = {name: array if array.flags.writeable else array.copy() for name, array in arrays.items()}
    return arrays, metadata


def load(path: PathLike, allow_unsigned: bool = False) -> dict[str, np.ndarray]:
    """Read a checkpoint written by ``save``; return its arrays by name.

    Verifies the NanoSign trailer first (see ``load_with_metadata`` for the errors).
    """
    arrays, _ = load_with_metadata(path, allow_unsigned=allow_unsigned)
    return arrays
