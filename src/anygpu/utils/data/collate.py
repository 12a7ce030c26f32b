"""Collation: turn a list of samples into one batch, keeping the samples' structure.

`default_collate` follows torch's rules: tensors are stacked along a new first dimension;
NumPy arrays and NumPy scalars become tensors (stacked on the host, one upload); Python
ints become an int64 tensor, floats a float64 tensor (as torch; float64 is computed on the
host), bools a bool tensor; strings and bytes stay a list; dicts, named tuples, tuples and
lists are collated field by field (a tuple of fields comes back as a list, as in torch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ... import dtypes
from ...tensor import Tensor, int64, stack, tensor

__all__ = ["default_collate", "default_convert", "host_collate", "host_convert", "HostArray"]

_FOUND = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


class HostArray:
    """A batch field made on the host (in a DataLoader worker process): a NumPy array and the
    dtype its tensor gets. Pickled, it rebuilds as a Tensor where it is unpickled (the main
    process), so workers never make or send GPU buffers."""

    __slots__ = ("array", "dtype")

    def __init__(self, array: np.ndarray, dtype=None):
        self.array, self.dtype = array, dtype

    def __reduce__(self):
        return host_to_tensor, (self.array, None if self.dtype is None else self.dtype.name)


def host_to_tensor(array: np.ndarray, dtype_name: str | None):
    """The Tensor a HostArray (or a Tensor made in a worker) stands for, on this process's GPU."""
    return tensor(array, dtype=None if dtype_name is None else dtypes._BY_NAME[dtype_name])


class _OnDevice:
    """default_collate's leaves as Tensors (the main process)."""

    @staticmethod
    def stack(tensors):
        return stack(list(tensors), 0)

    @staticmethod
    def array(array: np.ndarray, dtype=None):
        return tensor(array, dtype=dtype)


class _OnHost:
    """default_collate's leaves as HostArrays (a worker process)."""

    @staticmethod
    def stack(tensors):
        return HostArray(stack(list(tensors), 0).numpy(), tensors[0].dtype)  # one read-back per field

    @staticmethod
    def array(array: np.ndarray, dtype=None):
        return HostArray(array, dtype)


def default_collate(batch):
    """One batch from a list of samples (see the module docstring for the rules)."""
    return _collate(batch, _OnDevice)


def host_collate(batch):
    """default_collate with every tensor field left on the host as a HostArray (what a
    DataLoader worker sends; it becomes the same batch of Tensors in the main process)."""
    return _collate(batch, _OnHost)


def _collate(batch, leaves):
    if not isinstance(batch, Sequence) or isinstance(batch, (str, bytes)) or len(batch) == 0:
        raise ValueError(f"default_collate: expected a non-empty list of samples, got {type(batch).__name__}"
                         + (" of length 0" if isinstance(batch, Sequence) else ""))
    elem = batch[0]
    if isinstance(elem, Tensor):
        shapes = {tuple(t.shape) for t in batch}
        if len(shapes) != 1:
            raise ValueError(f"default_collate: stack expects each tensor to be equal size, got shapes "
                             f"{sorted(shapes)}")
        return leaves.stack(batch)
    if isinstance(elem, (np.ndarray, np.generic)) and not isinstance(elem, (np.str_, np.bytes_)):
        arrays = [np.asarray(b) for b in batch]
        if elem.dtype.kind not in "biuf":
            raise TypeError(_FOUND.format(elem.dtype))
        if len({a.shape for a in arrays}) != 1:
            raise ValueError(f"default_collate: stack expects each array to be equal size, got shapes "
                             f"{sorted({a.shape for a in arrays})}")
        return leaves.array(np.stack(arrays))
    if isinstance(elem, bool):
        return leaves.array(np.array(batch, dtype=np.bool_), dtypes.bool)
    if isinstance(elem, int):
        return leaves.array(np.array(batch, dtype=np.int64), int64)
    if isinstance(elem, float):
        return leaves.array(np.array(batch, dtype=np.float64), dtypes.float64)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, Mapping):
        collated = {key: _collate([sample[key] for sample in batch], leaves) for key in elem}
        try:
            return type(elem)(collated)
        except TypeError:  # a mapping type that cannot be built from a dict
            return collated
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # named tuple
        return type(elem)(*(_collate(list(field), leaves) for field in zip(*batch)))
    if isinstance(elem, Sequence):
        sizes = {len(sample) for sample in batch}
        if len(sizes) != 1:
            raise ValueError(f"default_collate: each element in list of batch should be of equal size, "
                             f"got sizes {sorted(sizes)}")
        fields = [_collate(list(field), leaves) for field in zip(*batch)]
        if isinstance(elem, tuple):
            return fields
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(_FOUND.format(type(elem)))


def default_convert(data):
    """What DataLoader applies to each sample when batching is off (batch_size=None): NumPy
    arrays and scalars become tensors, containers are converted element by element."""
    return _convert(data, _OnDevice)


def host_convert(data):
    """default_convert with NumPy leaves kept as HostArrays (a worker process)."""
    return _convert(data, _OnHost)


def _convert(data, leaves):
    if isinstance(data, (np.ndarray, np.generic)) and not isinstance(data, (np.str_, np.bytes_)):
        return leaves.array(np.asarray(data)) if data.dtype.kind in "biuf" else data
    if isinstance(data, Mapping):
        converted = {key: _convert(value, leaves) for key, value in data.items()}
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_convert(d, leaves) for d in data))
    if isinstance(data, tuple):
        return [_convert(d, leaves) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([_convert(d, leaves) for d in data])
        except TypeError:
            return [_convert(d, leaves) for d in data]
    return data
