"""float64 Buffers: IEEE doubles held on the host in numpy.

WGSL has no 64-bit float, and emulating one (pairs of f32) would not give float64's range
or correctly rounded transcendentals. So a float64 tensor's elements live in a
`HostBuffer`: a Buffer of dtype "f64" whose values are a 1-D contiguous numpy float64
array (`arr`), with no GPU memory. Every op that receives one runs its numpy counterpart
(ops/host64/), computed in float64 as torch's CPU kernels do; what such an op returns as
indices or masks (i32, bool) goes back to the GPU like any other Buffer. Converting a
tensor to or from float64 is a read or an upload.
"""

from __future__ import annotations

import numpy as np

from .device import Buffer
from .errors import GpuError


class HostBuffer(Buffer):
    """A flat float64 array on the host with the Buffer interface (len, dtype, _dev)."""

    __slots__ = ("arr",)

    def __init__(self, dev, arr) -> None:
        arr = np.ascontiguousarray(arr, dtype=np.float64).reshape(-1)
        super().__init__(dev, None, arr.nbytes, arr.size, "f64")
        self.arr = arr

    @property
    def _gpu(self):
        raise GpuError("a float64 Buffer lives on the host (numpy): no kernel can bind it; "
                       "convert the tensor with .float() first")

    def __repr__(self) -> str:
        return f"HostBuffer(len={self.len}, dtype=f64)"


def is_host(buf) -> bool:
    return buf.__class__ is HostBuffer


def host_values(dev, buf) -> np.ndarray:
    """A Buffer's elements as a 1-D numpy array: a HostBuffer's own array (do not modify it),
    any other Buffer read from the GPU (f32, f16, i32, u32 as stored; bool as bool)."""
    if buf.__class__ is HostBuffer:
        return buf.arr
    return dev.read(buf)
