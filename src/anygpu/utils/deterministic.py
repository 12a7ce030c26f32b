"""torch.utils.deterministic: `fill_uninitialized_memory` (default True), whether `empty` and
its kin are filled with NaN / the dtype's largest value while use_deterministic_algorithms
is on (anygpu.ops.determinism); a module attribute that reads and sets that switch."""

from __future__ import annotations

import builtins
import sys
import types

from ..ops import determinism as _determinism


class _Module(types.ModuleType):
    @property
    def fill_uninitialized_memory(self) -> bool:
        return _determinism._state["fill_uninitialized_memory"]

    @fill_uninitialized_memory.setter
    def fill_uninitialized_memory(self, value: bool) -> None:
        if not isinstance(value, builtins.bool):
            raise TypeError(f"fill_uninitialized_memory: expected a bool, got {type(value).__name__}")
        _determinism._state["fill_uninitialized_memory"] = value


sys.modules[__name__].__class__ = _Module
