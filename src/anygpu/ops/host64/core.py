"""float64 counterparts of the moves: casts, strided gather/scatter, select, concat,
transpose and the sums that undo broadcasting (ops/nd.py, ops/shape.py)."""

from __future__ import annotations

import numpy as np

from ...runtime.dtypes import DTYPES
from ..nd import broadcast_dims
from ...runtime.host import HostBuffer
from . import f64, host_op, values


def _strided_index(shape, strides, offset: int) -> np.ndarray:
    """The flat positions of a (shape, strides, offset) view, in row-major order."""
    index = np.full(tuple(shape), int(offset), dtype=np.int64)
    for d, (size, stride) in enumerate(zip(shape, strides)):
        axis = [1] * len(shape)
        axis[d] = size
        index = index + (np.arange(size, dtype=np.int64) * int(stride)).reshape(axis)
    return index.reshape(-1)


@host_op("cast")
def cast(dev, x, dtype: str):
    """float64 <-> any dtype as ops/nd.cast: float -> i32 truncates toward zero, anything ->
    bool is != 0 (NaN included), bool -> numbers 0/1."""
    if x.dtype == dtype:
        return x
    if dtype not in DTYPES:
        raise ValueError(f"cast: dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    if dtype == "f64":  # from the GPU
        data = dev.read(x)
        return f64(dev, data.astype(np.float64))
    data = x.arr
    if dtype == "bool":
        return dev.upload(data != 0, "bool")
    if dtype in ("i32", "u32"):
        with np.errstate(invalid="ignore"):
            wide = np.trunc(data)
            if dtype == "i32" and data.size and np.nanmax(np.abs(np.where(np.isfinite(wide), wide, 0))) >= 2**31:
                raise ValueError("cast: float64 values beyond the 32-bit integer range cannot be stored "
                                 "(anygpu keeps integers in 32 bits)")
            ints = np.where(np.isfinite(wide), wide, 0).astype(np.int64)
        return dev.upload(ints.astype(np.int32 if dtype == "i32" else np.uint32), dtype)
    with np.errstate(over="ignore"):
        return dev.upload(data.astype(DTYPES[dtype].host), dtype)


@host_op("strided_gather")
def strided_gather(dev, x, shape, strides, offset: int = 0, dtype: str | None = None):
    if dtype not in (None, "f64"):
        raise ValueError(f"strided_gather: converts between f32 and f16 only, not f64 to {dtype}")
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if n == 0:
        return f64(dev, np.zeros(0))
    return f64(dev, x.arr[_strided_index(shape, strides, offset)])


@host_op("strided_scatter")
def strided_scatter(dev, src, dst, shape, strides, offset: int = 0):
    if src.__class__ is not HostBuffer or dst.__class__ is not HostBuffer:
        raise ValueError(f"strided copy: {src.dtype} elements cannot go into a {dst.dtype} buffer")
    n = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if n:
        dst.arr[_strided_index(shape, strides, offset)] = src.arr[:n]
    return dst


@host_op("where")
def where(dev, cond, a, b):
    c = values(dev, cond)
    if c.size != a.len or c.size != b.len:
        raise ValueError(f"where: a and b must have len(cond) = {c.size} elements, got {a.len} and {b.len}")
    # (a float32 operand beside a float64 one is widened, as torch promotes)
    return f64(dev, np.where(c != 0, values(dev, a).astype(np.float64), values(dev, b).astype(np.float64)))


@host_op("concat")
def concat(dev, a, b, outer: int, a_inner: int, b_inner: int):
    return f64(dev, np.concatenate([values(dev, a).reshape(outer, a_inner),
                                    values(dev, b).reshape(outer, b_inner)], axis=1))


@host_op("transpose")
def transpose(dev, a, outer: int, d0: int, d1: int, inner: int):
    return f64(dev, a.arr.reshape(outer, d0, d1, inner).transpose(0, 2, 1, 3))


@host_op("sum_dims")
def sum_dims(dev, buf, shape, dims):
    dims = tuple(sorted(d for d in set(dims) if shape[d] != 1))
    if not dims:
        return buf
    return f64(dev, buf.arr.reshape(tuple(shape)).sum(axis=dims))


@host_op("sum_to_shape")
def sum_to_shape(dev, grad, grad_shape, shape):
    grad_shape, shape = tuple(grad_shape), tuple(shape)
    if grad_shape == shape:
        return grad
    return sum_dims(dev, grad, grad_shape, broadcast_dims(grad_shape, shape))
