"""torch.save / torch.load for anygpu: nested checkpoints as signed safetensors, never pickle.

A checkpoint as scripts write it — ``{"model": model.state_dict(), "optimizer":
opt.state_dict(), "epoch": 3, "loss": 0.12, "args": {...}}`` — is stored as one safetensors
file: every tensor and array is a safetensors entry (named by its path, e.g.
``model.fc1.weight``); everything else (the nesting, numbers, strings, None, bools, lists,
tuples, dicts with str/int/float/bool/None/tuple keys) is a JSON description of the object
in the header's metadata under ``anygpu.structure``. The file is signed with NanoSign and
written atomically by `checkpoint.save`, so a changed byte is a `TamperedError` on load.

A flat dict of str -> tensor/array (a state dict) is written exactly as `anygpu.save`
always wrote it, with no structure entry, and loads as a dict of Tensors, as before.

PyTorch's own ``.pt``/``.pth`` files (zip archives of pickles) are read by `anygpu.io.pth`,
whose restricted unpickler allows only what torch's ``weights_only=True`` loader allows and
runs no code from the file.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

import numpy as np

from anygpu import bounded_json
from anygpu.io import checkpoint, pth

__all__ = ["save", "load", "FORMAT_KEY", "STRUCTURE_KEY"]

FORMAT_KEY = "anygpu.format"
FORMAT = "nested-1"
STRUCTURE_KEY = "anygpu.structure"
# JSON levels of the structure entry that save writes and load reads: 100 nested dicts.
STRUCTURE_MAX_DEPTH = 300

_SCALARS = (type(None), bool, int, float, str)


def _is_array_like(value) -> bool:
    """A tensor of any library (anygpu, or e.g. a torch CPU tensor in a conversion) or an array."""
    return isinstance(value, np.ndarray) or (hasattr(value, "numpy") and hasattr(value, "shape")
                                             and not isinstance(value, (np.generic, type)))


def _is_flat(obj) -> bool:
    """A state dict: str keys, tensor/array values (what `anygpu.save` always wrote)."""
    return isinstance(obj, Mapping) and all(
        isinstance(key, str) and _is_array_like(value) and not isinstance(value, np.generic)
        for key, value in obj.items())


def _host_array(value, where: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):  # a torch tensor that requires grad refuses .numpy()
        value = value.detach()
    try:
        return np.asarray(value.numpy())
    except (TypeError, RuntimeError) as error:
        if hasattr(value, "float"):  # e.g. a torch bfloat16 tensor: NumPy has no such type; widen exactly
            try:
                return np.asarray(value.float().numpy())
            except (TypeError, RuntimeError):
                pass
        raise ValueError(f"save: {where} could not be read as an array ({error}); "
                         "convert it first (e.g. .float())") from None


def _dtype_name(value) -> str:
    name = getattr(value.dtype, "name", None) or str(value.dtype)
    return str(name).removeprefix("torch.")


class _Writer:
    """Walks an object, collecting arrays by entry name and returning its JSON description."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def _entry_name(self, path: str) -> str:
        name = path or "tensor"
        if name == "__metadata__":
            name = "__metadata__#"
        candidate, n = name, 1
        while candidate in self.arrays:
            candidate, n = f"{name}#{n}", n + 1
        return candidate

    def encode(self, value, path: str, where: str):
        from anygpu.tensor import Tensor
        if value is None or isinstance(value, bool):
            return value
        for kind in (int, float, str):  # subclasses too (np.float64, IntEnum): as the plain value
            if isinstance(value, kind):
                return kind(value)
        if isinstance(value, np.generic) and value.dtype.kind in "biuf":
            name = self._entry_name(path)
            self.arrays[name] = np.asarray(value)
            return {"numpy_scalar": name}
        if isinstance(value, np.ndarray):
            name = self._entry_name(path)
            self.arrays[name] = value
            return {"ndarray": name}
        if isinstance(value, Tensor) or _is_array_like(value):
            name = self._entry_name(path)
            self.arrays[name] = _host_array(value, where)
            node = {"tensor": name, "dtype": _dtype_name(value)}
            if getattr(value, "requires_grad", False):
                node["requires_grad"] = True
            if type(value).__name__ == "Parameter":
                node["parameter"] = True
            return node
        if isinstance(value, Mapping):
            items = []
            for key, item in value.items():
                key_node = self._key(key, where)
                items.append([key_node, self.encode(item, f"{path}.{key}" if path else str(key),
                                                    f"{where}[{key!r}]")])
            return {"dict": items}
        if isinstance(value, (list, tuple)):
            kind = "tuple" if isinstance(value, tuple) else "list"
            return {kind: [self.encode(item, f"{path}.{i}" if path else str(i), f"{where}[{i}]")
                           for i, item in enumerate(value)]}
        if type(value).__name__ == "device" and hasattr(value, "type") and hasattr(value, "index"):
            return {"device": str(value)}
        if hasattr(value, "state_dict") and hasattr(value, "named_parameters"):  # an nn.Module
            raise ValueError(f"save: {where} is a whole module ({type(value).__name__}); saving one needs pickle, "
                             "which anygpu never writes: save model.state_dict() instead and load it into a new "
                             "model with load_state_dict")
        raise ValueError(f"save: {where} is a {type(value).__name__}; anygpu saves tensors, arrays, numbers, "
                         "strings, None and bools, in dicts, lists and tuples (it never pickles objects)")

    def _key(self, key, where: str):
        if isinstance(key, _SCALARS):
            return key
        if isinstance(key, tuple):
            return {"tuple": [self._key(k, where) for k in key]}
        if isinstance(key, np.integer):
            return int(key)
        raise ValueError(f"save: {where} has a key {key!r} of type {type(key).__name__}; "
                         "expected str, int, float, bool, None or a tuple of them")


def _decode(node, arrays: Mapping[str, np.ndarray], where: str):
    from anygpu.dtypes import to_dtype
    from anygpu.tensor import tensor
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        raise ValueError(f"load: {where}: malformed structure (a bare list)")
    if not isinstance(node, dict):
        raise ValueError(f"load: {where}: malformed structure ({type(node).__name__})")

    def array(name):
        if not isinstance(name, str) or name not in arrays:
            raise ValueError(f"load: {where}: the structure names a tensor {name!r} that the file does not hold")
        return arrays[name]

    if "dict" in node:
        pairs = node["dict"]
        if not isinstance(pairs, list) or not all(isinstance(pair, list) and len(pair) == 2 for pair in pairs):
            raise ValueError(f"load: {where}: malformed structure (a dict node needs [key, value] pairs)")
        return {_decode_key(key, where): _decode(value, arrays, f"{where}[{key!r}]") for key, value in pairs}
    if "list" in node:
        return [_decode(item, arrays, f"{where}[{i}]") for i, item in enumerate(node["list"])]
    if "tuple" in node:
        return tuple(_decode(item, arrays, f"{where}[{i}]") for i, item in enumerate(node["tuple"]))
    if "ndarray" in node:
        return array(node["ndarray"])
    if "numpy_scalar" in node:
        return array(node["numpy_scalar"])[()]
    if "tensor" in node:
        host = array(node["tensor"])
        try:
            dtype = to_dtype(node.get("dtype"), "load")
        except ValueError:  # e.g. a float64 tensor from a torch conversion: anygpu's default type
            dtype = None
        result = tensor(host, dtype=dtype)
        if node.get("parameter"):
            from anygpu.nn import Parameter
            return Parameter(result, requires_grad=bool(node.get("requires_grad", False)))
        if node.get("requires_grad"):
            result.requires_grad_(True)
        return result
    if "device" in node:
        from anygpu.placement import device
        return device(node["device"])
    raise ValueError(f"load: {where}: malformed structure (unknown node {sorted(node)})")


def _decode_key(node, where: str):
    if isinstance(node, dict) and "tuple" in node:
        return tuple(_decode_key(k, where) for k in node["tuple"])
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    raise ValueError(f"load: {where}: malformed dict key {node!r}")


def save(obj, f, metadata: Mapping[str, str] | None = None, *, pickle_module=None, pickle_protocol=None,
         _use_new_zipfile_serialization: bool = True, _disable_byteorder_record: bool = False) -> str:
    """torch.save(obj, f): write `obj` (see the module docstring) to the path or binary file `f`.

    Returns the BLAKE3 hash of the safetensors payload. `pickle_module` is refused (anygpu
    never pickles); the other torch arguments are accepted and change nothing."""
    if pickle_module is not None:
        raise ValueError("save: pickle_module is not supported; anygpu writes safetensors and never pickles")
    if _is_flat(obj):
        arrays = {key: value if isinstance(value, np.ndarray) else _host_array(value, f"obj[{key!r}]")
                  for key, value in obj.items()}
        meta = metadata
    else:
        if metadata is not None and (FORMAT_KEY in metadata or STRUCTURE_KEY in metadata):
            raise ValueError(f"save: metadata keys {FORMAT_KEY!r} and {STRUCTURE_KEY!r} are anygpu's own")
        writer = _Writer()
        structure = writer.encode(obj, "", "obj")
        arrays = writer.arrays
        meta = dict(metadata or {})
        meta[FORMAT_KEY] = FORMAT
        meta[STRUCTURE_KEY] = json.dumps(structure, separators=(",", ":"), ensure_ascii=False)
        if bounded_json.nesting_depth(meta[STRUCTURE_KEY], stop_above=STRUCTURE_MAX_DEPTH) > STRUCTURE_MAX_DEPTH:
            raise ValueError(f"save: obj nests containers deeper than load reads back (its structure is over "
                             f"{STRUCTURE_MAX_DEPTH} JSON levels: a dict takes 3, a list or tuple 2)")
    if hasattr(f, "write"):
        with tempfile.TemporaryDirectory(prefix="anygpu-save-") as folder:
            path = os.path.join(folder, "checkpoint.safetensors")
            digest = checkpoint.save(arrays, path, metadata=meta)
            with open(path, "rb") as handle:
                f.write(handle.read())
        return digest
    return checkpoint.save(arrays, f, metadata=meta)


# A PyTorch .pt/.pth file (a zip archive or a legacy pickle stream) is read by anygpu.io.pth's
# restricted unpickler, which runs no code from the file.
def _is_torch_file(path) -> bool:
    try:
        # open_regular: a FIFO or device is refused here instead of blocking or reading forever
        with checkpoint.nanosign.open_regular(path, "load") as handle:
            head = handle.read(9)
    except (IsADirectoryError, PermissionError):
        return False  # checkpoint.load gives its own error
    return pth.is_pth(head)


def load(f, map_location=None, pickle_module=None, *, weights_only: bool | None = None, mmap: bool | None = None,
         allow_unsigned: bool = False, **pickle_load_args) -> Any:
    """torch.load(f): read what `save` wrote (a path or a binary file object).

    The NanoSign signature is checked first (`TamperedError` when a byte changed; an
    unsigned file needs `allow_unsigned=True`). A flat file (a state dict, or any plain
    safetensors file) loads as a dict of Tensors; a nested one as the object saved, with
    Tensors, NumPy arrays and Python values where they were. `map_location` and
    `weights_only` are accepted: tensors load onto the process's adapter, and the format
    holds data only, so every load is as safe as torch's weights_only=True. A PyTorch .pt/.pth
    file is read by `anygpu.io.pth` (restricted to torch's weights_only globals, always)."""
    from anygpu import placement
    from anygpu.tensor import tensor
    if pickle_module is not None:
        raise ValueError("load: pickle_module is not supported; anygpu reads safetensors and never unpickles")
    if isinstance(map_location, (str, placement.device)):
        placement.check_device("load", map_location)
    if hasattr(f, "read"):
        data = f.read()
        where = getattr(f, "name", None) or type(f).__name__
        with tempfile.TemporaryDirectory(prefix="anygpu-load-") as folder:
            path = os.path.join(folder, "checkpoint.safetensors")
            with open(path, "wb") as handle:
                handle.write(data)
            if pth.is_pth(data[:9]):  # a PyTorch checkpoint: the restricted reader, no code run
                return pth.load(io.BytesIO(data), where=str(where))
            arrays, metadata = checkpoint.load_with_metadata(path, allow_unsigned=allow_unsigned)
    else:
        if _is_torch_file(f):
            return pth.load(f)
        arrays, metadata = checkpoint.load_with_metadata(f, allow_unsigned=allow_unsigned)
    if STRUCTURE_KEY not in metadata:
        return {name: tensor(array) for name, array in arrays.items()}
    if metadata.get(FORMAT_KEY) != FORMAT:
        raise ValueError(f"load: {f} has structure format {metadata.get(FORMAT_KEY)!r}; this anygpu reads {FORMAT!r}")
    # The signature proves the bytes are unchanged, not who wrote them: a hostile structure
    # (nesting deeper than Python's stack, wrong node shapes) is a ValueError, never a crash.
    structure = bounded_json.loads(metadata[STRUCTURE_KEY], f"load: {f}: the structure entry",
                                   max_depth=STRUCTURE_MAX_DEPTH)
    try:
        return _decode(structure, arrays, "obj")
    except RecursionError:
        raise ValueError(f"load: {f}: the structure is nested too deeply to read") from None
    except (TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"load: {f}: malformed structure ({type(error).__name__}: {error})") from None
