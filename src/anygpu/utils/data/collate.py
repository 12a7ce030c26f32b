"""Collation: turn a list of samples into one batch, keeping the samples' structure.

`default_collate` follows torch's rules: tensors are stacked along a new first dimension;
NumPy arrays and NumPy scalars become tensors (stacked on the host, one upload); Python
ints become an int64 tensor, floats a float32 tensor (torch: float64, which anygpu has
not), bools a bool tensor; strings and bytes stay a list; dicts, named tuples, tuples and
lists are collated field by field (a tuple of fields comes back as a list, as in torch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ... import dtypes
from ...tensor import Tensor, float32, int64, stack, tensor

__all__ = ["default_collate", "default_convert"]

_FOUND = "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"


def default_collate(batch):
    """One batch from a list of samples (see the module docstring for the rules)."""
    if not isinstance(batch, Sequence) or isinstance(batch, (str, bytes)) or len(batch) == 0:
        raise ValueError(f"default_collate: expected a non-empty list of samples, got {type(batch).__name__}"
                         + (" of length 0" if isinstance(batch, Sequence) else ""))
    elem = batch[0]
    if isinstance(elem, Tensor):
        shapes = {tuple(t.shape) for t in batch}
        if len(shapes) != 1:
            raise ValueError(f"default_collate: stack expects each tensor to be equal size, got shapes "
                             f"{sorted(shapes)}")
        return stack(list(batch), 0)
    if isinstance(elem, (np.ndarray, np.generic)) and not isinstance(elem, (np.str_, np.bytes_)):
        arrays = [np.asarray(b) for b in batch]
        if elem.dtype.kind not in "biuf":
            raise TypeError(_FOUND.format(elem.dtype))
        if len({a.shape for a in arrays}) != 1:
            raise ValueError(f"default_collate: stack expects each array to be equal size, got shapes "
                             f"{sorted({a.shape for a in arrays})}")
        return tensor(np.stack(arrays))
    if isinstance(elem, bool):
        return tensor(list(batch), dtype=dtypes.bool)
    if isinstance(elem, int):
        return tensor(list(batch), dtype=int64)
    if isinstance(elem, float):
        return tensor(list(batch), dtype=float32)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, Mapping):
        collated = {key: default_collate([sample[key] for sample in batch]) for key in elem}
        try:
            return type(elem)(collated)
        except TypeError:  # a mapping type that cannot be built from a dict
            return collated
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # named tuple
        return type(elem)(*(default_collate(list(field)) for field in zip(*batch)))
    if isinstance(elem, Sequence):
        sizes = {len(sample) for sample in batch}
        if len(sizes) != 1:
            raise ValueError(f"default_collate: each element in list of batch should be of equal size, "
                             f"got sizes {sorted(sizes)}")
        fields = [default_collate(list(field)) for field in zip(*batch)]
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
    if isinstance(data, (np.ndarray, np.generic)) and not isinstance(data, (np.str_, np.bytes_)):
        return tensor(data) if data.dtype.kind in "biuf" else data
    if isinstance(data, Mapping):
        converted = {key: default_convert(value) for key, value in data.items()}
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data
