"""Read PyTorch checkpoints (``.pt`` / ``.pth``) without PyTorch, running none of their code.

A torch checkpoint is a pickle: a program for a small stack machine that may import and
call anything it names, which is why ``pickle.load`` on a downloaded file is unsafe. Here
the pickle runs under a restricted ``pickle.Unpickler`` whose ``find_class`` knows only
the names torch's own ``weights_only=True`` loader allows (tensor rebuild functions,
storage classes, dtypes, ``torch.Size``, ``torch.device``, ``OrderedDict``, ``set``,
``complex``, ...) and maps each to a function of this module; every other name is refused
by name, never imported, never called. ``persistent_load`` resolves the storage records
that point at the archive's ``data/<key>`` members. Before it runs, each pickle's opcodes
are read (``pickletools.genops``, which runs nothing) and any outside the set torch's loader
runs (with protocol 3-4's forms of the same operations) is refused.

Formats: the zip archive torch has written since 1.6 (``<prefix>/data.pkl``,
``<prefix>/data/<key>`` storages, ``byteorder``, ``version``) and the legacy stream of
pickles (``_use_new_zipfile_serialization=False``). Sizes are checked before memory is
taken: the pickle's size, each storage's declared element count against its zip member,
compression ratios (zip bombs), symlink and encrypted entries, strides and offsets that
would leave their storage, and the bytes that copies of overlapping views would need.

`load` gives anygpu Tensors that are views of one Tensor per torch storage, with torch's
sizes, strides and offsets (tensors that shared a storage share GPU memory); `read` gives
host copies (`HostTensor`) and needs no GPU.
"""

from __future__ import annotations

import collections
import io
import math
import os
import pickle
import pickletools
import stat
import struct
import warnings
import zipfile
import zlib
from typing import Any, BinaryIO, Callable

import numpy as np

__all__ = ["PthError", "HostTensor", "TorchDtype", "is_pth", "load", "read"]

# The pickle program (data.pkl): real ones are kilobytes to a few megabytes.
MAX_PICKLE_BYTES = 256 << 20
# A compressed member may expand at most this many times (torch stores members uncompressed).
MAX_COMPRESSION_RATIO = 100
# Bytes that tensors may need beyond the storages they read (views with stride 0 or
# overlapping windows are copied in full): more than this is refused.
MAX_EXTRA_BYTES = 1 << 30
_MAX_DIMS = 64  # NumPy's limit

_ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
_LEGACY_PROTOCOL_VERSION = 1001


class PthError(pickle.UnpicklingError, ValueError):
    """A PyTorch checkpoint that anygpu refuses or cannot read (a ValueError too)."""


# --------------------------------------------------------------------------- element types

# torch dtype name -> (NumPy type the bytes are read as, NumPy type a reader gets).
# bfloat16 is read as its 16 bits and widened to float32 exactly (NumPy has no bfloat16).
_DTYPES: dict[str, tuple[np.dtype, np.dtype]] = {
    name: (np.dtype(raw), np.dtype(out)) for name, raw, out in (
        ("float32", "<f4", "float32"), ("float64", "<f8", "float64"), ("float16", "<f2", "float16"),
        ("bfloat16", "<u2", "float32"), ("int64", "<i8", "int64"), ("int32", "<i4", "int32"),
        ("int16", "<i2", "int16"), ("int8", "i1", "int8"), ("uint8", "u1", "uint8"), ("bool", "?", "bool"),
        ("uint16", "<u2", "uint16"), ("uint32", "<u4", "uint32"), ("uint64", "<u8", "uint64"),
        ("complex64", "<c8", "complex64"), ("complex128", "<c16", "complex128"),
    )
}
# torch's legacy storage classes (torch.FloatStorage, torch.cuda.HalfStorage, ...).
_STORAGE_CLASSES = {
    "FloatStorage": "float32", "DoubleStorage": "float64", "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16", "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16",
    "CharStorage": "int8", "ByteStorage": "uint8", "BoolStorage": "bool",
    "ComplexFloatStorage": "complex64", "ComplexDoubleStorage": "complex128",
}
# Every dtype name torch's weights_only loader accepts as a global (torch.<name>).
_TORCH_DTYPE_NAMES = (
    *_DTYPES, "qint8", "qint32", "quint8", "quint4x2", "quint2x4", "complex32", "bits1x8", "bits2x4",
    "bits4x2", "bits8", "bits16", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fnuz", "float8_e4m3fnuz",
    "float8_e8m0fnu", "float4_e2m1fn_x2", *(f"uint{n}" for n in range(1, 8)), *(f"int{n}" for n in range(1, 8)),
)


class TorchDtype:
    """A torch dtype named in a checkpoint that anygpu has no dtype object for (e.g. torch.uint8)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def __setstate__(self, state):
        raise PthError("a checkpoint may not set the state of a dtype")

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def __eq__(self, other) -> bool:
        return isinstance(other, TorchDtype) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("torch-dtype", self.name))


def _dtype_object(dtype: TorchDtype):
    """anygpu's dtype object of that name where it has one (after unpickling: BUILD could
    otherwise reach the process-wide dtype objects)."""
    from anygpu import dtypes
    known = getattr(dtypes, dtype.name, None)
    return known if isinstance(known, dtypes.dtype) and known.name == dtype.name else dtype


# --------------------------------------------------------------------------- records built while unpickling


class _StorageType:
    """What a torch storage class name (torch.FloatStorage, torch.storage.UntypedStorage) becomes."""

    __slots__ = ("name", "dtype")

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, dtype

    def __setstate__(self, state):
        raise PthError(f"a checkpoint may not set the state of {self.name}")

    def __call__(self, *args):
        raise PthError(f"a checkpoint may not call {self.name} (storages come from the archive's records)")


class _Storage:
    """One storage as a reference in the pickle sees it: its flat array (of `dtype`)."""

    __slots__ = ("key", "dtype", "array")

    def __init__(self, key: str, dtype: str, array: np.ndarray):
        self.key, self.dtype, self.array = key, dtype, array

    def __setstate__(self, state):
        raise PthError("a checkpoint may not set the state of a storage")


class _TensorRecord:
    """A tensor as the pickle describes it; made into an array or Tensor after the pickle ran."""

    __slots__ = ("storage", "offset", "size", "stride", "requires_grad", "parameter", "dtype", "negated",
                 "conjugated")

    def __init__(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                 requires_grad: bool, dtype: str):
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride
        self.requires_grad, self.parameter, self.dtype = requires_grad, False, dtype
        # torch's neg and conj bits (tensor metadata): the values are the storage's negated/conjugated
        self.negated = self.conjugated = False

    def __setstate__(self, state):
        raise PthError("a checkpoint may not set the state of a tensor (BUILD on a tensor)")


class _Global:
    """A name the checkpoint may use: calling it runs `function` (ours, never torch's)."""

    __slots__ = ("name", "function")

    def __init__(self, name: str, function: Callable[..., Any]):
        self.name, self.function = name, function

    def __setstate__(self, state):
        raise PthError(f"a checkpoint may not set the state of {self.name}")

    def __call__(self, *args):
        return self.function(*args)

    def __repr__(self) -> str:
        return self.name


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise PthError(f"{what} is {_short(value)}; expected a non-negative integer")
    return value


def _dims(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > _MAX_DIMS:
        raise PthError(f"{what} is {_short(value)}; expected a tuple of at most {_MAX_DIMS} integers")
    return tuple(_int(side, what) for side in value)


def _rebuild(storage, storage_offset, size, stride, requires_grad=False, backward_hooks=None, metadata=None,
             dtype=None) -> _TensorRecord:
    """torch._utils._rebuild_tensor_v2's arguments (and v3's dtype): a checked tensor record."""
    if not isinstance(storage, _Storage):
        raise PthError(f"a tensor's storage is a {type(storage).__name__}; expected a storage record")
    offset = _int(storage_offset, "a tensor's storage offset")
    size = _dims(size, "a tensor's size")
    stride = _dims(stride, "a tensor's stride")
    if len(stride) != len(size):
        raise PthError(f"a tensor has size {size} and stride {stride} of different lengths")
    if not isinstance(requires_grad, bool):
        raise PthError(f"a tensor's requires_grad is {requires_grad!r}; expected a bool")
    if backward_hooks:
        raise PthError("a tensor carries backward hooks; a checkpoint of data cannot hold them")
    name = storage.dtype
    if dtype is not None:
        if not isinstance(dtype, TorchDtype):
            raise PthError(f"a tensor's dtype is {dtype!r}; expected a torch dtype")
        name = dtype.name
        if name not in _DTYPES:
            raise PthError(f"a tensor has dtype torch.{name}, which anygpu cannot read")
        storage = _retyped(storage, name)
    if math.prod(size) > 0:
        last = offset + sum((side - 1) * step for side, step in zip(size, stride))
        if last >= storage.array.size:
            raise PthError(f"a tensor of size {size}, stride {stride} and offset {offset} reaches element {last} "
                           f"of a storage of {storage.array.size}")
    record = _TensorRecord(storage, offset, size, stride, requires_grad, name)
    if metadata:
        if not isinstance(metadata, dict) or not set(metadata) <= {"neg", "conj"} \
                or not all(isinstance(flag, bool) for flag in metadata.values()):
            raise PthError(f"a tensor with metadata {_short(metadata)}; anygpu reads torch's 'neg' and 'conj' bits")
        record.negated, record.conjugated = metadata.get("neg", False), metadata.get("conj", False)
    return record


def _rebuild_v1(storage, storage_offset, size, stride):
    return _rebuild(storage, storage_offset, size, stride)


def _rebuild_v3(storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype, metadata=None):
    return _rebuild(storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata, dtype)


def _rebuild_parameter(data, requires_grad, backward_hooks, state=None):
    if not isinstance(data, _TensorRecord):
        raise PthError(f"a Parameter wraps a {type(data).__name__}; expected a tensor")
    if not isinstance(requires_grad, bool):
        raise PthError(f"a Parameter's requires_grad is {requires_grad!r}; expected a bool")
    if backward_hooks:
        raise PthError("a Parameter carries backward hooks; a checkpoint of data cannot hold them")
    if state:
        raise PthError("a Parameter carries Python attributes (torch's _rebuild_parameter_with_state); "
                       "anygpu reads the tensor data of checkpoints only")
    record = _TensorRecord(data.storage, data.offset, data.size, data.stride, requires_grad, data.dtype)
    record.parameter, record.negated, record.conjugated = True, data.negated, data.conjugated
    return record


def _rebuild_from_type_v2(function, new_type, args, state):
    marker = getattr(new_type, "function", None)
    if marker not in (_tensor_type_marker, _parameter_type_marker):
        raise PthError(f"a tensor of type {new_type!r}: only torch.Tensor and torch.nn.Parameter are read")
    if not isinstance(function, _Global) or not isinstance(args, tuple):
        raise PthError("a tensor is rebuilt by something other than a tensor rebuild function")
    if state:
        raise PthError("a tensor carries Python attributes; anygpu reads the tensor data of checkpoints only")
    return function(*args)


def _tensor_type_marker(*args):
    raise PthError("a checkpoint may not call torch.Tensor")


def _parameter_type_marker(*args):
    raise PthError("a checkpoint may not call torch.nn.Parameter")


def _unsupported(name: str) -> Callable[..., Any]:
    def refuse(*args):
        raise PthError(f"the checkpoint holds a tensor that {name} rebuilds (quantized, sparse, nested, meta or "
                       "device-only); anygpu reads dense tensors only")
    return refuse


def _ordered_dict(items=()):
    if not isinstance(items, (list, tuple, dict)):
        raise PthError(f"OrderedDict of a {type(items).__name__}")
    return collections.OrderedDict(items)


def _counter(items=()):
    if not isinstance(items, (list, tuple, dict)):
        raise PthError(f"Counter of a {type(items).__name__}")
    return collections.Counter(items)


def _size(dims=()):
    from anygpu.functions import Size
    return Size(_dims(dims, "torch.Size"))


def _device(kind, index=None):
    from anygpu.placement import device
    if not isinstance(kind, (str, int)) or (index is not None and not isinstance(index, int)):
        raise PthError(f"torch.device({kind!r}, {index!r})")
    try:
        return device(kind, index)
    except ValueError as error:
        raise PthError(str(error)) from None


def _encode(text, encoding="utf-8"):
    # Protocol 2 writes bytes objects as _codecs.encode(text, 'latin1').
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise PthError(f"_codecs.encode of a {type(text).__name__} with {encoding!r}; expected a str and 'latin1'")
    return text.encode("latin1")


def _bytearray(data=b""):
    if not isinstance(data, (bytes, bytearray, list)):
        raise PthError(f"bytearray of a {type(data).__name__}")
    return bytearray(data)


def _set(items=()):
    if not isinstance(items, (list, tuple, set, frozenset)):
        raise PthError(f"set of a {type(items).__name__}")
    return set(items)


def _complex(real=0.0, imag=0.0):
    if not all(isinstance(part, (int, float)) for part in (real, imag)):
        raise PthError(f"complex({real!r}, {imag!r})")
    return complex(real, imag)


def _get_layout(name):
    if name != "torch.strided":
        raise PthError(f"a tensor with layout {name!r}; anygpu reads strided (dense) tensors only")
    return name


def _allowed_globals() -> dict[str, Callable[[], Any]]:
    """Name -> a maker of what that name means here. The names are torch's weights_only list."""
    table: dict[str, Callable[[], Any]] = {
        "collections.OrderedDict": lambda: _Global("collections.OrderedDict", _ordered_dict),
        "collections.Counter": lambda: _Global("collections.Counter", _counter),
        "torch.Size": lambda: _Global("torch.Size", _size),
        "torch.device": lambda: _Global("torch.device", _device),
        "torch.Tensor": lambda: _Global("torch.Tensor", _tensor_type_marker),
        "torch.nn.parameter.Parameter": lambda: _Global("torch.nn.parameter.Parameter", _parameter_type_marker),
        "torch.serialization._get_layout": lambda: _Global("torch.serialization._get_layout", _get_layout),
        "_codecs.encode": lambda: _Global("_codecs.encode", _encode),
        "builtins.bytearray": lambda: _Global("builtins.bytearray", _bytearray),
        "builtins.set": lambda: _Global("builtins.set", _set),
        "builtins.complex": lambda: _Global("builtins.complex", _complex),
        "torch._utils._rebuild_tensor": lambda: _Global("torch._utils._rebuild_tensor", _rebuild_v1),
        "torch._utils._rebuild_tensor_v2": lambda: _Global("torch._utils._rebuild_tensor_v2", _rebuild),
        "torch._utils._rebuild_tensor_v3": lambda: _Global("torch._utils._rebuild_tensor_v3", _rebuild_v3),
        "torch._utils._rebuild_parameter": lambda: _Global("torch._utils._rebuild_parameter", _rebuild_parameter),
        "torch._utils._rebuild_parameter_with_state":
            lambda: _Global("torch._utils._rebuild_parameter_with_state", _rebuild_parameter),
        "torch._tensor._rebuild_from_type_v2":
            lambda: _Global("torch._tensor._rebuild_from_type_v2", _rebuild_from_type_v2),
        "torch.storage.UntypedStorage": lambda: _StorageType("torch.storage.UntypedStorage", "uint8"),
    }
    for rebuild in ("_rebuild_qtensor", "_rebuild_sparse_tensor", "_rebuild_meta_tensor_no_storage",
                    "_rebuild_nested_tensor", "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
                    "_rebuild_device_tensor_from_cpu_tensor"):
        full = f"torch._utils.{rebuild}"
        table[full] = (lambda full=full: _Global(full, _unsupported(full)))
    for class_name, dtype_name in _STORAGE_CLASSES.items():
        for module in ("torch", "torch.cuda"):
            full = f"{module}.{class_name}"
            table[full] = (lambda full=full, dtype_name=dtype_name: _StorageType(full, dtype_name))
    for dtype_name in _TORCH_DTYPE_NAMES:
        table[f"torch.{dtype_name}"] = (lambda dtype_name=dtype_name: TorchDtype(dtype_name))
    return table


_ALLOWED = _allowed_globals()
# Python 2 module names that protocol-2 pickles use for builtins.
_MODULE_ALIASES = {"__builtin__": "builtins"}


def _refusal(name: str) -> PthError:
    return PthError(f"Unsupported global: GLOBAL {name} is not an allowed global. anygpu reads PyTorch "
                    "checkpoints as torch.load(weights_only=True) does: only tensors, storages, dtypes, "
                    "torch.Size, torch.device and plain containers; nothing else is imported or called. "
                    "Where the file is trusted, load it with PyTorch and save model.state_dict()")


class _Unpickler(pickle.Unpickler):
    """pickle.Unpickler whose globals are this module's table and whose persistent ids are storages."""

    def __init__(self, file: BinaryIO, storage: Callable[[tuple], _Storage] | None):
        super().__init__(file, encoding="utf-8")
        self._storage = storage

    def find_class(self, module: str, name: str):
        full = f"{_MODULE_ALIASES.get(module, module)}.{name}"
        maker = _ALLOWED.get(full)
        if maker is None:
            raise _refusal(f"{module}.{name}")
        return maker()

    def persistent_load(self, pid):
        if self._storage is None:
            raise PthError(f"a persistent id {pid!r} where no storage can be")
        return self._storage(pid)


# The opcodes torch's weights_only loader runs (protocol 2), and protocol 3-4's forms of the
# same operations (bytes, short strings, frames, memo, STACK_GLOBAL through find_class, sets).
# Not allowed: protocol 0-1 text opcodes, INST/OBJ/EXT*, NEWOBJ_EX, PERSID (text), protocol
# 5's out-of-band buffers and bytearrays.
_OPCODES = frozenset((
    "PROTO", "STOP", "MARK", "POP", "POP_MARK", "DUP", "NONE", "NEWTRUE", "NEWFALSE", "BININT", "BININT1",
    "BININT2", "LONG1", "LONG4", "BINFLOAT", "SHORT_BINSTRING", "BINSTRING", "BINUNICODE", "SHORT_BINUNICODE",
    "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "EMPTY_LIST", "APPEND", "APPENDS", "EMPTY_DICT", "SETITEM", "SETITEMS", "EMPTY_SET", "ADDITEMS",
    "FROZENSET", "BINGET", "LONG_BINGET", "BINPUT", "LONG_BINPUT", "MEMOIZE", "FRAME", "GLOBAL", "STACK_GLOBAL",
    "REDUCE", "BUILD", "NEWOBJ", "BINPERSID",
))


def _check_opcodes(stream: BinaryIO) -> None:
    """Read one pickle's opcodes (without running them) and refuse any outside _OPCODES."""
    start = stream.tell()
    try:
        with warnings.catch_warnings():  # pickletools warns about odd escapes in text opcodes' arguments
            warnings.simplefilter("ignore")
            for opcode, _, position in pickletools.genops(stream):
                if opcode.name not in _OPCODES:
                    raise PthError(f"the pickle uses opcode {opcode.name} (at byte {position}), which PyTorch "
                                   "checkpoints do not use")
    except PthError:
        raise
    except Exception as error:  # truncated, unknown opcode, bad argument
        raise PthError(f"not a readable PyTorch checkpoint pickle ({error})") from None
    stream.seek(start)


def _unpickle(data: bytes | BinaryIO, storage: Callable[[tuple], _Storage] | None, where: str):
    stream = io.BytesIO(data) if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        _check_opcodes(stream)
        return _Unpickler(stream, storage).load()
    except PthError as error:
        text = str(error)
        raise PthError(text if text.startswith("load: ") else f"load: {where}: {text}") from None
    except RecursionError:
        raise PthError(f"load: {where}: the pickle is nested too deeply") from None
    except MemoryError:
        raise PthError(f"load: {where}: the pickle needs more memory than there is") from None
    except Exception as error:  # a malformed pickle: stack underflow, bad opcode, wrong argument types
        raise PthError(f"load: {where}: not a readable PyTorch checkpoint pickle "
                       f"({type(error).__name__}: {error})") from None


def _storage_dtype(pid) -> tuple[str, str, int]:
    """(key, dtype name, element count) of a persistent id ('storage', type, key, location, numel[, view])."""
    if not isinstance(pid, tuple) or len(pid) not in (5, 6) or pid[0] != "storage":
        raise PthError(f"persistent id {pid!r}; expected ('storage', type, key, location, numel)")
    _, storage_type, key, location, numel = pid[:5]
    if not isinstance(storage_type, _StorageType):
        raise PthError(f"a storage of type {storage_type!r}; expected a torch storage class")
    if not isinstance(key, str) or not isinstance(location, str):
        raise PthError(f"a storage key {key!r} at {location!r}; expected strings")
    if len(pid) == 6 and pid[5] is not None:
        raise PthError(f"a storage view {pid[5]!r} (torch < 1.0 files); anygpu reads whole storages")
    return key, storage_type.dtype, _int(numel, "a storage's element count")


def _retyped(storage: _Storage, dtype: str) -> _Storage:
    if storage.dtype == dtype:
        return storage
    raw = _DTYPES[dtype][0]
    data = storage.array.view(np.uint8)
    if data.size % raw.itemsize:
        raise PthError(f"a storage of {data.size} bytes read as {dtype} ({raw.itemsize} bytes each)")
    return _Storage(storage.key, dtype, data.view(raw))


# --------------------------------------------------------------------------- the two formats


def _check_member(info: zipfile.ZipInfo, where: str, limit: int | None = None) -> None:
    if stat.S_ISLNK(info.external_attr >> 16):
        raise PthError(f"load: {where}: the archive entry {info.filename!r} is a symbolic link")
    if info.flag_bits & 0x1:
        raise PthError(f"load: {where}: the archive entry {info.filename!r} is encrypted")
    if limit is not None and info.file_size > limit:
        raise PthError(f"load: {where}: {info.filename!r} is {info.file_size} bytes; at most {limit} are read")
    if info.compress_type != zipfile.ZIP_STORED and info.file_size > max(
            MAX_COMPRESSION_RATIO * info.compress_size, 1 << 20):
        raise PthError(f"load: {where}: {info.filename!r} expands from {info.compress_size} to {info.file_size} "
                       f"bytes (over {MAX_COMPRESSION_RATIO} times: a zip bomb?)")


def _stored_bytes(whole: memoryview, info: zipfile.ZipInfo, where: str) -> memoryview | None:
    """An uncompressed member's bytes as a slice of the file in memory (no copy), its CRC
    checked; None where its local header is not where the central directory says."""
    start = info.header_offset
    header = bytes(whole[start:start + 30])
    if len(header) < 30 or header[:4] != _ZIP_MAGIC:
        return None
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    begin = start + 30 + name_length + extra_length
    try:
        name = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437")
    except UnicodeEncodeError:
        return None
    if bytes(whole[start + 30:start + 30 + name_length]) != name:
        return None
    body = whole[begin:begin + info.file_size]
    if len(body) != info.file_size:
        raise PthError(f"load: {where}: {info.filename!r} reaches beyond the end of the file; the file is truncated")
    if zlib.crc32(body) != info.CRC:
        raise PthError(f"load: {where}: {info.filename!r} fails its CRC-32 check; the file is damaged")
    return body


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, size: int | None = None,
                 whole: memoryview | None = None) -> bytes | memoryview:
    """The member's bytes, reading no more than its declared size; `size`, when given, must be it.
    With the file in memory (`whole`), an uncompressed member is a slice of it, not a copy."""
    if size is not None and info.file_size != size:
        raise PthError(f"load: {where}: {info.filename!r} holds {info.file_size} bytes; the checkpoint "
                       f"declares {size}")
    if whole is not None and info.compress_type == zipfile.ZIP_STORED:
        body = _stored_bytes(whole, info, where)
        if body is not None:
            return body
    try:
        with archive.open(info) as member:
            data = member.read(info.file_size)
            extra = member.read(1)  # reaching the end makes zipfile check the CRC
    except Exception as error:  # zipfile's many ways to meet damage: BadZipFile, EOFError, struct.error, zlib.error
        raise PthError(f"load: {where}: {info.filename!r} cannot be read ({error}); the file is damaged "
                       "or truncated") from None
    if len(data) != info.file_size or extra:
        raise PthError(f"load: {where}: {info.filename!r} holds {len(data) + len(extra)} bytes, its header "
                       f"says {info.file_size}; the file is damaged or truncated")
    return data


def _read_zip(data: bytes, where: str):
    file_size, whole = len(data), memoryview(data)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except Exception as error:  # BadZipFile, EOFError, struct.error, UnicodeDecodeError, ...
        raise PthError(f"load: {where}: not a readable zip archive ({error}); the file is damaged or "
                       "truncated") from None
    with archive:
        members = archive.infolist()
        for info in members:
            _check_member(info, where)
            if info.compress_type == zipfile.ZIP_STORED and info.header_offset + info.compress_size > file_size:
                raise PthError(f"load: {where}: {info.filename!r} reaches beyond the end of the file; the file is "
                               "truncated")
        pickles = [info for info in members if info.filename.count("/") <= 1
                   and info.filename.rpartition("/")[2] == "data.pkl"]
        if len(pickles) != 1:
            raise PthError(f"load: {where}: a zip archive with {len(pickles)} data.pkl records; a PyTorch "
                           "checkpoint has exactly one")
        prefix = pickles[0].filename[:-len("data.pkl")]
        by_name = {info.filename: info for info in members}
        _check_member(pickles[0], where, MAX_PICKLE_BYTES)
        program = _read_member(archive, pickles[0], where)
        little = True
        if prefix + "byteorder" in by_name:
            order = _read_member(archive, by_name[prefix + "byteorder"], where)[:16]
            if order not in (b"little", b"big"):
                raise PthError(f"load: {where}: byteorder record {order!r}; expected 'little' or 'big'")
            little = order == b"little"
        loaded: dict[str, bytes | memoryview] = {}
        typed: dict[tuple[str, str], _Storage] = {}

        def storage(pid) -> _Storage:
            key, dtype, numel = _storage_dtype(pid)
            cached = typed.get((key, dtype))
            if cached is not None:
                return cached
            info = by_name.get(f"{prefix}data/{key}")
            if info is None:
                raise PthError(f"the pickle names storage {key!r}, which the archive does not hold")
            raw = _DTYPES[dtype][0]
            if key not in loaded:
                loaded[key] = _read_member(archive, info, where, numel * raw.itemsize, whole)
            elif len(loaded[key]) != numel * raw.itemsize:
                raise PthError(f"storage {key!r} is read as {numel} x {dtype}, "
                               f"{numel * raw.itemsize} bytes; it holds {len(loaded[key])}")
            array = np.frombuffer(loaded[key], dtype=raw if little else raw.newbyteorder(">"))
            if not little:
                array = array.astype(raw)
            typed[(key, dtype)] = _Storage(key, dtype, array)
            return typed[(key, dtype)]

        return _unpickle(program, storage, where)


def _read_legacy(data: bytes, where: str):
    """torch's pre-1.6 format: pickles of a magic number, a version, system facts, the object,
    the storage keys; then each storage as an 8-byte element count and its bytes."""
    stream = io.BytesIO(data)
    magic = _unpickle(stream, None, where)
    if magic != _LEGACY_MAGIC_NUMBER:
        raise PthError(f"load: {where}: not a PyTorch checkpoint (magic number {magic!r})")
    version = _unpickle(stream, None, where)
    if version != _LEGACY_PROTOCOL_VERSION:
        raise PthError(f"load: {where}: legacy checkpoint protocol {version!r}; anygpu reads "
                       f"{_LEGACY_PROTOCOL_VERSION}")
    info = _unpickle(stream, None, where)
    little = not isinstance(info, dict) or info.get("little_endian", True) is not False
    storages: dict[str, _Storage] = {}
    declared_bytes = 0

    def storage(pid) -> _Storage:
        nonlocal declared_bytes
        key, dtype, numel = _storage_dtype(pid)
        made = storages.get(key)
        if made is not None:
            if (made.dtype, made.array.size) != (dtype, numel):
                raise PthError(f"storage {key!r} is declared twice with different types or sizes")
            return made
        # Every storage's bytes follow the pickle in this file: more than it holds is a lie.
        declared_bytes += 8 + numel * _DTYPES[dtype][0].itemsize
        if declared_bytes > len(data):
            raise PthError(f"the pickle declares storages of {declared_bytes} bytes in a file of {len(data)}")
        made = storages[key] = _Storage(key, dtype, np.zeros(numel, _DTYPES[dtype][0]))  # filled below
        return made

    result = _unpickle(stream, storage, where)
    keys = _unpickle(stream, None, where)
    if not isinstance(keys, list) or not all(isinstance(key, str) for key in keys) or set(keys) != set(storages):
        raise PthError(f"load: {where}: the storage key list does not match the storages the pickle names")
    for key in keys:
        made = storages[key]
        raw = made.array.dtype
        head = stream.read(8)
        if len(head) != 8:
            raise PthError(f"load: {where}: storage {key!r} is missing; the file is truncated")
        (count,) = struct.unpack("<q" if little else ">q", head)
        if count != made.array.size:
            raise PthError(f"load: {where}: storage {key!r} holds {count} elements; the pickle declares "
                           f"{made.array.size}")
        body = stream.read(made.array.nbytes)
        if len(body) != made.array.nbytes:
            raise PthError(f"load: {where}: storage {key!r} needs {made.array.nbytes} bytes, the file holds "
                           f"{len(body)}; the file is truncated")
        made.array[...] = np.frombuffer(body, dtype=raw if little else raw.newbyteorder(">"))
    return result


# --------------------------------------------------------------------------- from records to values


class _Materializer:
    """Turns tensor records into arrays (or Tensors), counting the bytes copies of overlapping
    views add beyond the storages read, and keeping one result per record (shared tensors stay
    one object)."""

    def __init__(self, where: str, make: Callable[[_Materializer, _TensorRecord, str], Any]):
        self.where, self.make = where, make
        self.extra_bytes = 0
        self.done: dict[int, Any] = {}

    def check_budget(self, record: _TensorRecord, path: str) -> None:
        """Count what a tensor holds beyond its storage (stride 0, overlapping windows): copies,
        and anygpu's views (which keep a position per element), need that memory."""
        numel, flat = math.prod(record.size), record.storage.array
        if numel > flat.size:
            self.extra_bytes += (numel - flat.size) * _DTYPES[record.dtype][1].itemsize
            if self.extra_bytes > MAX_EXTRA_BYTES:
                raise PthError(f"load: {self.where}: tensor {path} ({record.size}, stride {record.stride}) repeats "
                               f"storage elements; such tensors would need over {MAX_EXTRA_BYTES} bytes beyond "
                               "the checkpoint's own")

    def array(self, record: _TensorRecord, path: str) -> np.ndarray:
        raw = _DTYPES[record.dtype][0]
        numel = math.prod(record.size)
        flat = record.storage.array
        self.check_budget(record, path)
        if numel == 0:
            values = np.zeros(record.size, dtype=raw)
        else:
            window = np.lib.stride_tricks.as_strided(
                flat[record.offset:], shape=record.size,
                strides=tuple(step * raw.itemsize for step in record.stride), writeable=False)
            values = np.array(window, dtype=raw, order="C")
        values = _widen(values, record.dtype)
        if record.negated:
            values = np.negative(values)
        if record.conjugated:
            values = np.conj(values)
        return values

    def value(self, obj, path: str, depth: int = 0):
        if depth > 400:
            raise PthError(f"load: {self.where}: the checkpoint is nested more than 400 levels deep")
        if isinstance(obj, (str, bytes, int, float, complex, type(None))):
            return obj
        if isinstance(obj, TorchDtype):
            return _dtype_object(obj)
        key = id(obj)
        if key in self.done:
            return self.done[key]
        if isinstance(obj, _TensorRecord):
            result = self.make(self, obj, path)
            self.done[key] = result
            return result
        if isinstance(obj, _Storage):
            raise PthError(f"load: {self.where}: {path} is a bare storage; anygpu reads tensors")
        if isinstance(obj, (_Global, _StorageType)):
            raise PthError(f"load: {self.where}: {path} is {obj.name} itself; a checkpoint of data holds values")
        if isinstance(obj, dict):
            self.done[key] = obj
            keys = list(obj)
            if any(isinstance(k, _TensorRecord) for k in keys):
                raise PthError(f"load: {self.where}: {path} is a dict keyed by tensors")
            for k in keys:
                obj[k] = self.value(obj[k], f"{path}[{k!r}]" if path else repr(k), depth + 1)
            attributes = getattr(obj, "__dict__", None)
            if attributes:  # state_dict()'s _metadata
                for name in list(attributes):
                    attributes[name] = self.value(attributes[name], f"{path}.{name}", depth + 1)
            return obj
        if isinstance(obj, list):
            self.done[key] = obj
            for index, item in enumerate(obj):
                obj[index] = self.value(item, f"{path}[{index}]", depth + 1)
            return obj
        if isinstance(obj, tuple):
            items = [self.value(item, f"{path}[{index}]", depth + 1) for index, item in enumerate(obj)]
            result = type(obj)(items) if type(obj) is not tuple else tuple(items)
            self.done[key] = result
            return result
        if isinstance(obj, (set, frozenset)):
            if any(isinstance(item, _TensorRecord) for item in obj):
                raise PthError(f"load: {self.where}: {path} is a set of tensors")
            return obj
        if isinstance(obj, bytearray):
            return obj
        return obj  # dtypes, devices, Size: made by this module's own functions


class HostTensor:
    """A tensor read from a checkpoint, kept in host memory (what `read` returns in place of
    torch tensors): `.numpy()`, `.shape`, `.dtype` (NumPy's), `.requires_grad`, `.is_parameter`.
    bfloat16 data is widened to float32."""

    __slots__ = ("_array", "requires_grad", "is_parameter")

    def __init__(self, array: np.ndarray, requires_grad: bool = False, is_parameter: bool = False):
        self._array, self.requires_grad, self.is_parameter = array, requires_grad, is_parameter

    def numpy(self) -> np.ndarray:
        return self._array

    @property
    def shape(self) -> tuple[int, ...]:
        return self._array.shape

    @property
    def dtype(self) -> np.dtype:
        return self._array.dtype

    def __repr__(self) -> str:
        return f"HostTensor(shape={self.shape}, dtype={self.dtype})"


# --------------------------------------------------------------------------- entry points


def is_pth(head: bytes) -> bool:
    """Whether the first bytes of a file are a PyTorch checkpoint's: a zip archive's local
    header, or a pickle's PROTO opcode (protocol 2 to 5). A safetensors file has its JSON
    header's '{' at byte 8, which neither has."""
    if head[8:9] == b"{":
        return False
    return head.startswith(_ZIP_MAGIC) or (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5)


def _records(f, where: str | None):
    if hasattr(f, "read"):
        data = f.read()
        if not isinstance(data, (bytes, bytearray)):
            raise PthError(f"load: {type(f).__name__}.read() gave {type(data).__name__}; expected bytes "
                           "(open the file in binary mode)")
        where = where or str(getattr(f, "name", None) or type(f).__name__)
        data = bytes(data)
    else:
        from anygpu.io.nanosign import open_regular
        where = where or os.fspath(f)
        with open_regular(f, "load") as handle:  # a FIFO or device is refused before any read
            data = handle.read()
    if data.startswith(_ZIP_MAGIC):
        return _read_zip(data, where), where
    if data[:1] == b"\x80":
        return _read_legacy(data, where), where
    raise PthError(f"load: {where} is not a PyTorch checkpoint (it starts with {data[:4]!r}, neither a zip "
                   "archive nor a pickle)")


def read(f, *, where: str | None = None):
    """The object a PyTorch checkpoint holds, with `HostTensor`s (host memory, no GPU) where
    it holds tensors. `f` is a path or a binary file object."""
    records, where = _records(f, where)
    materializer = _Materializer(where, lambda materializer, record, path: HostTensor(
        materializer.array(record, path), record.requires_grad, record.parameter))
    return _walk(materializer, records)


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(f"load: {message}", stacklevel=4)


def _widen(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values read as `dtype`'s raw type in the type a reader gets (bfloat16: float32)."""
    if dtype == "bfloat16":  # the upper 16 bits of a float32
        values = (values.astype(np.uint32) << 16).view(np.float32)
    return values.astype(_DTYPES[dtype][1], copy=False)


def _to_tensor(array: np.ndarray, record: _TensorRecord, path: str, where: str, plain: bool = False):
    """An anygpu Tensor of `array`; a Parameter, or requiring grad, as `record` (unless plain)."""
    from anygpu import dtypes
    from anygpu.tensor import tensor
    kind = array.dtype
    if kind.kind == "c":
        raise PthError(f"load: {where}: tensor {path or 'obj'} is {record.dtype}; anygpu has no complex tensors")
    if kind == np.float64:
        dtype = dtypes.float64 if dtypes.float64.storage is not None else dtypes.float32
    elif kind == np.float16:
        from anygpu.ops import gpu
        dtype = dtypes.float16
        if not gpu().supports("f16"):  # the weights still load, e.g. into a float32 model
            _warn_once("float16 tensors become float32: this adapter lacks the feature 'shader-f16'")
            dtype = dtypes.float32
    elif kind.kind == "f":
        dtype = dtypes.bfloat16 if record.dtype == "bfloat16" and dtypes.bfloat16.storage is not None \
            else dtypes.float32
    elif kind == np.bool_:
        dtype = dtypes.bool
    elif kind == np.int64:
        dtype = dtypes.int64
    else:  # int8/16/32, uint8/16/32/64: anygpu's integers are int32
        dtype = dtypes.int32
    try:
        result = tensor(array, dtype=dtype)
    except ValueError as error:
        raise PthError(f"load: {where}: tensor {path or 'obj'} ({record.dtype} {record.size}): {error}") from None
    if plain:
        return result
    if record.parameter:
        from anygpu.nn import Parameter
        return Parameter(result, requires_grad=record.requires_grad)
    if record.requires_grad and dtype.is_floating_point:
        result.requires_grad_(True)
    return result


def load(f, *, where: str | None = None):
    """torch.load of a PyTorch checkpoint for anygpu: the object it holds, with anygpu Tensors
    (Parameters where torch had them) in place of torch tensors. float32/float16/int64/int32/
    bool keep their dtype (float16 becomes float32, with a warning, on an adapter without
    'shader-f16'); bfloat16 becomes float32 (exactly); float64 becomes float64 where anygpu
    has it, else float32; int8/int16/uint8/uint16/uint32/uint64 become int32 (values
    outside int32 are an error). `f` is a path or a binary file object."""
    records, where = _records(f, where)
    return _walk(_Materializer(where, _SharedStorages(where)), records)


class _SharedStorages:
    """Tensors as views of one anygpu Tensor per torch storage (torch's sizes, strides and
    offsets), so tensors that shared a storage in torch share GPU memory here too, and an
    in-place write through one is seen by the others. Parameters and tensors that require
    grad (leaves of their own, as torch's) and tensors with torch's neg bit are copies."""

    def __init__(self, where: str):
        self.where = where
        self.bases: dict[int, Any] = {}

    def __call__(self, materializer: _Materializer, record: _TensorRecord, path: str):
        from anygpu.tensor import no_grad
        if record.parameter or record.requires_grad or record.negated or record.conjugated \
                or math.prod(record.size) == 0:
            return _to_tensor(materializer.array(record, path), record, path, self.where)
        materializer.check_budget(record, path)
        base = self.bases.get(id(record.storage))
        if base is None:
            flat = _widen(record.storage.array, record.storage.dtype)
            base = self.bases[id(record.storage)] = _to_tensor(flat, record, path, self.where, plain=True)
        with no_grad():
            return base.as_strided(record.size, record.stride, record.offset)


def _walk(materializer: _Materializer, records):
    try:
        return materializer.value(records, "")
    except RecursionError:
        raise PthError(f"load: {materializer.where}: the checkpoint is nested too deeply") from None
