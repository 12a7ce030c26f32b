"""Element types of GPU Buffers and how kernels spell them in WGSL.

A dtype names three things: how an element is stored (`storage`, the WGSL type of the
`array<...>` a kernel binds; `itemsize` bytes), what a kernel computes in (`compute`:
f16 elements are loaded into f32 and accumulate there), and the host's numpy type.

    f32   float32, stored and computed as f32
    f16   float16 storage (needs the adapter feature 'shader-f16'), computed in f32
    i32   int32
    u32   uint32 (raw words: indices, bit patterns)
    bool  0/1 stored in a u32 word (WGSL has no storable bool); computed as u32
    f64   float64, held on the host in numpy (WGSL has no f64): a `host.HostBuffer`, never
          bound to a kernel; every op on it runs in numpy (ops/host64/)

`kind` groups dtypes whose kernels share expressions: "float" (f32, f16), "int" (i32),
"uint" (u32) and "bool"; "host" (f64) has no kernels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    name: str
    storage: str       # WGSL type of one stored element
    compute: str       # WGSL type kernels compute in
    itemsize: int      # bytes per element
    host: type         # numpy dtype of `Device.read` / `upload`
    kind: str          # float, int, uint or bool

    @property
    def enable(self) -> str:
        """The WGSL directive a kernel storing this dtype starts with ('' for none)."""
        return "enable f16;" if self.storage == "f16" else ""


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("f32", "f32", "f32", 4, np.float32, "float"),
    DType("f16", "f16", "f32", 2, np.float16, "float"),
    DType("i32", "i32", "i32", 4, np.int32, "int"),
    DType("u32", "u32", "u32", 4, np.uint32, "uint"),
    DType("bool", "u32", "u32", 4, np.bool_, "bool"),
    DType("f64", "f64", "f64", 8, np.float64, "host"),
)}

# numpy dtype -> Buffer dtype for `Device.upload` without an explicit dtype.
FROM_NUMPY = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
              np.dtype(np.uint32): "u32", np.dtype(np.bool_): "bool"}


def dtype_of(name: str, op: str = "alloc") -> DType:
    """The DType called `name`, or ValueError naming the op and the known dtypes."""
    try:
        return DTYPES[name]
    except (KeyError, TypeError):
        raise ValueError(f"{op}: dtype must be one of {sorted(DTYPES)}, got {name!r}") from None


def to_host(words: np.ndarray, dtype: DType) -> np.ndarray:
    """Stored elements (as read back) -> the host array of `dtype` (bool from its u32 word)."""
    return words != 0 if dtype.name == "bool" else words


def to_storage(arr: np.ndarray, dtype: DType) -> np.ndarray:
    """A host array -> contiguous 1-D elements as the GPU stores them."""
    if dtype.name == "bool":
        return np.ascontiguousarray(np.asarray(arr) != 0, dtype=np.uint32).reshape(-1)
    return np.ascontiguousarray(arr, dtype=dtype.host).reshape(-1)


def storage_numpy(dtype: DType):
    """The numpy type of one stored element (bool is a u32 word)."""
    return np.uint32 if dtype.name == "bool" else dtype.host
