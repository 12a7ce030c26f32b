"""torch.nn's dictionary and parameter containers: ModuleDict, ParameterList, ParameterDict.

Each registers what it holds under its key ("0", "1", ... for a list), so state-dict
keys read like torch's (`heads.left.weight`, `scales.0`)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Iterator, Mapping

from .modules import Module, Parameter
from ..tensor import Tensor

__all__ = ["ModuleDict", "ParameterList", "ParameterDict"]


def _pairs(values, what: str):
    """(key, value) pairs from a mapping or an iterable of pairs, as torch's update()."""
    if isinstance(values, Mapping):
        return list(values.items())
    pairs = []
    for i, item in enumerate(values):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(f"{what}.update: element #{i} should be a (key, value) pair, got {type(item).__name__}")
        pairs.append((item[0], item[1]))
    return pairs


class ModuleDict(Module):
    """Sub-modules by string key, in insertion order (no forward of its own)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key) -> bool:
        return key in self._modules

    def clear(self) -> None:
        self._modules.clear()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules) -> None:
        for key, module in _pairs(modules, "ModuleDict"):
            self[key] = module


def _as_parameter(value):
    """torch's containers turn plain tensors into Parameters; other values are refused here."""
    if isinstance(value, Parameter) or value is None:
        return value
    if isinstance(value, Tensor):
        return Parameter(value)
    raise TypeError(f"cannot store a {type(value).__name__} as a parameter (an anygpu Tensor is expected)")


class ParameterList(Module):
    """Parameters in a list, registered as "0", "1", ... (plain Tensors become Parameters)."""

    def __init__(self, values: Iterable | None = None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def _index(self, idx: int) -> int:
        size = len(self)
        if not -size <= idx < size:
            raise IndexError(f"index {idx} is out of range for ParameterList of length {size}")
        return idx % size

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return ParameterList(list(self)[idx])
        return self._parameters[str(self._index(idx))]

    def __setitem__(self, idx: int, param) -> None:
        self.register_parameter(str(self._index(idx)), _as_parameter(param))

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[Parameter]:
        return iter(self._parameters[str(i)] for i in range(len(self)))

    def __iadd__(self, values) -> "ParameterList":
        return self.extend(values)

    def append(self, value) -> "ParameterList":
        self.register_parameter(str(len(self)), _as_parameter(value))
        return self

    def extend(self, values) -> "ParameterList":
        for value in values:
            self.append(value)
        return self

    def extra_repr(self) -> str:
        return "\n".join(f"({i}): Parameter containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]"
                         for i, p in enumerate(self))


class ParameterDict(Module):
    """Parameters by string key, in insertion order (plain Tensors become Parameters)."""

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str) -> Parameter:
        return self._parameters[key]

    def __setitem__(self, key: str, value) -> None:
        self.register_parameter(key, _as_parameter(value))

    def __delitem__(self, key: str) -> None:
        del self._parameters[key]

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def __contains__(self, key) -> bool:
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def items(self):
        return self._parameters.items()

    def values(self):
        return self._parameters.values()

    def get(self, key: str, default=None):
        return self._parameters.get(key, default)

    def pop(self, key: str) -> Parameter:
        value = self[key]
        del self[key]
        return value

    def clear(self) -> None:
        self._parameters.clear()

    def update(self, parameters) -> None:
        for key, value in _pairs(parameters, "ParameterDict"):
            self[key] = value

    def copy(self) -> "ParameterDict":
        return ParameterDict(OrderedDict(self.items()))

    def extra_repr(self) -> str:
        return "\n".join(f"({k}): Parameter containing: [{p.dtype} of size {'x'.join(map(str, p.shape))}]"
                         for k, p in self.items())
