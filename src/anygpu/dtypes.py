"""Tensor element types with PyTorch's names (`anygpu.float32`, `anygpu.long`, `anygpu.bool`).

A `dtype` is what a Tensor says it holds; `storage` is the runtime Buffer dtype its
elements live in on the GPU. WGSL has no portable 64-bit integer, so int64 tensors are
stored as i32 (values must fit in 32 bits; arithmetic wraps there). bool tensors are
stored as f32 0/1 words, so masks feed `where` and float arithmetic without a conversion.
float16 tensors are stored as f16 (where the adapter has the feature 'shader-f16'; kernels
compute in f32 and round the stored result to f16). float64 tensors are held on the host in
numpy (runtime/host.py: WGSL has no f64) and computed there in IEEE double. bfloat16 is named
so scripts can mention it; asking for such a tensor raises a clear error.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(eq=False, slots=True)  # eq=False: dtypes compare and hash by identity, as torch's
class dtype:
    """An element type: `is_floating_point`, `itemsize` (the size torch reports) and the
    Buffer dtype it is stored in (None: not available in this build)."""

    name: str
    is_floating_point: builtins.bool
    is_signed: builtins.bool
    itemsize: builtins.int
    storage: str | None
    host: Any

    @property
    def is_complex(self) -> bool:
        return False

    @property
    def is_integer(self) -> bool:
        return not self.is_floating_point and self.name != "bool"

    def __repr__(self) -> str:  # torch's spelling, so printed output matches a torch run
        return f"torch.{self.name}"


float32 = dtype("float32", True, True, 4, "f32", np.float32)
float16 = dtype("float16", True, True, 2, "f16", np.float16)
bfloat16 = dtype("bfloat16", True, True, 2, None, None)
float64 = dtype("float64", True, True, 8, "f64", np.float64)
int32 = dtype("int32", False, True, 4, "i32", np.int32)
int64 = dtype("int64", False, True, 8, "i32", np.int64)
bool = dtype("bool", False, False, 1, "f32", np.bool_)  # noqa: A001 — torch.bool

float = float32  # noqa: A001
half = float16
double = float64
int = int32  # noqa: A001
long = int64

ALL = (float32, float16, bfloat16, float64, int32, int64, bool)
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"float": float32, "half": float16, "double": float64, "int": int32, "long": int64,
                 "f32": float32, "f16": float16, "i32": int32})


# torch.set_default_dtype: the dtype of Python floats and of float factories without dtype=.
_default_float = [float32]


def default_float() -> dtype:
    """The default float dtype (torch.get_default_dtype): float32 unless set to float64."""
    return _default_float[0]


def set_default_float(value) -> None:
    result = to_dtype(value, "set_default_dtype")
    if result is not float32 and result is not float64:
        raise ValueError(f"set_default_dtype: expected torch.float32 or torch.float64, got {value}")
    _default_float[0] = result


def to_dtype(value, op: str = "tensor", default=None) -> dtype:
    """A dtype from a dtype, a name ('float32', 'long'), a numpy dtype or a Python type
    (float, int, bool). Refuses types anygpu cannot store, naming the alternative."""
    if value is None:
        return default if default is not None else _default_float[0]
    if isinstance(value, dtype):
        result = value
    elif value is builtins.float:
        result = _default_float[0]
    elif value is builtins.int:
        result = int64
    elif value is builtins.bool:
        result = bool
    elif isinstance(value, str) and value.removeprefix("torch.") in _BY_NAME:
        result = _BY_NAME[value.removeprefix("torch.")]
    else:
        try:
            np_dtype = np.dtype(value)
        except TypeError:
            raise ValueError(f"{op}: unknown dtype {value!r}") from None
        result = {"f": float32 if np_dtype.itemsize <= 4 else float64, "b": bool}.get(np_dtype.kind)
        if result is None and np_dtype.kind in "iu":
            result = int64 if np_dtype.itemsize == 8 else int32
        if result is None:
            raise ValueError(f"{op}: unsupported dtype {value!r}")
        if np_dtype == np.float16:
            result = float16
    if result.storage is None:
        alternative = "float32" if result.is_floating_point else "int32"
        raise ValueError(f"{op}: {result.name} tensors are not available: anygpu stores floats as float32, "
                         f"float16 or float64 (use dtype=torch.{alternative})")
    return result


def promote(a: dtype, b: dtype) -> dtype:
    """torch's result type of a binary op between two tensors of the same 'dimension class':
    bool < integer < float, and the wider integer or float (float16 with float32: float32)."""
    if a is b:
        return a
    if a.is_floating_point and b.is_floating_point:
        return a if a.itemsize >= b.itemsize else b
    if a.is_floating_point or b.is_floating_point:
        return a if a.is_floating_point else b
    if a is bool:
        return b
    if b is bool:
        return a
    return int64 if int64 in (a, b) else int32


class finfo:
    """torch.finfo for a float dtype: eps, max, min, tiny (smallest normal), bits, resolution."""

    def __init__(self, type=None):
        type = float32 if type is None else type
        info = np.finfo({"float32": np.float32, "float16": np.float16, "float64": np.float64}.get(
            getattr(type, "name", ""), np.float32)) if type is not bfloat16 else None
        if info is None:  # bfloat16: 8 exponent bits, 7 mantissa bits
            self.bits, self.eps, self.max, self.tiny, self.resolution = 16, 2.0**-7, 3.3895313892515355e38, \
                1.1754943508222875e-38, 0.01
        else:
            self.bits, self.eps, self.max = info.bits, builtins.float(info.eps), builtins.float(info.max)
            self.tiny, self.resolution = builtins.float(info.tiny), 10.0 ** -info.precision  # as torch: 1e-06
        self.min = -self.max
        self.smallest_normal = self.tiny
        self.dtype = getattr(type, "name", "float32")


class iinfo:
    """torch.iinfo for an integer dtype. anygpu stores int64 in 32 bits, so its limits are
    the int32 ones (values beyond them cannot be stored)."""

    def __init__(self, type):
        if type is bool or getattr(type, "is_floating_point", True):
            raise ValueError(f"iinfo: expected an integer dtype, got {type}")
        self.bits = 32
        self.max, self.min = 2**31 - 1, -2**31
        self.dtype = type.name
