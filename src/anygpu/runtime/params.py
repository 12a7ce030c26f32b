"""Kernel parameters declared once: the WGSL `struct Params` and the Python packing
both come from one `Params` declaration, so they cannot drift apart.

    SHAPE = Params("n: u32", "ndim: u32", "alpha: C", "pad: u32", "shape: u32[8]")
    SHAPE.wgsl("i32")    # 'struct Params { n: u32, ndim: u32, alpha: i32, pad: u32,
                         #   shape: array<vec4<u32>, 2>, }'
    SHAPE.format("i32")  # 'IIiI8I'

Field types: u32, i32, f32; `C` is the compute type of the kernel's dtype (f32 for f32
and f16, i32 for i32, u32 for u32 and bool); `u32[N]` (N a multiple of 4) is N words laid
out as array<vec4<u32>, N/4>, as uniform arrays need 16-byte strides. A kernel file
writes `{{PARAMS}}` where the struct goes; `Params.subs(dtype)` fills it.
"""

from __future__ import annotations

import math
import re

from .dtypes import dtype_of

_FORMAT = {"u32": "I", "i32": "i", "f32": "f"}
_FIELD = re.compile(r"^(\w+): (u32|i32|f32|C)(?:\[(\d+)\])?$")


class Params:
    """The uniform parameters of a kernel, in order."""

    def __init__(self, *fields: str):
        self.fields = []
        for text in fields:
            match = _FIELD.match(text.strip())
            if match is None:
                raise ValueError(f"Params: cannot read field {text!r} (expected 'name: u32|i32|f32|C[N]')")
            name, kind, count = match.group(1), match.group(2), match.group(3)
            count = int(count) if count else 0
            if count % 4:
                raise ValueError(f"Params: array field {name} needs a multiple of 4 words, got {count}")
            words = sum(c or 1 for _, _, c in self.fields)
            if count and words % 4:
                raise ValueError(f"Params: array field {name} starts at word {words}; pad the fields "
                                 f"before it to a multiple of 4 words (uniform arrays are 16-byte aligned)")
            self.fields.append((name, kind, count))

    @staticmethod
    def _type(kind: str, dtype: str) -> str:
        return dtype_of(dtype, "kernel").compute if kind == "C" else kind

    def wgsl(self, dtype: str = "f32") -> str:
        parts = []
        for name, kind, count in self.fields:
            t = self._type(kind, dtype)
            parts.append(f"{name}: array<vec4<{t}>, {count // 4}>" if count else f"{name}: {t}")
        return "struct Params { " + ", ".join(parts) + " }"

    def format(self, dtype: str = "f32") -> str:
        # Called on every launch: memoised per dtype (building it cost ~1 us per op).
        known = self.__dict__.setdefault("_formats", {})
        text = known.get(dtype)
        if text is None:
            text = known[dtype] = "".join(
                f"{count}{_FORMAT[self._type(kind, dtype)]}" if count else _FORMAT[self._type(kind, dtype)]
                for name, kind, count in self.fields)
        return text

    def subs(self, dtype: str = "f32") -> dict[str, str]:
        return {"PARAMS": self.wgsl(dtype)}

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.fields]


_F32_MAX = 3.4028234663852886e38


def pack(param_struct, buffer, offset: int, params) -> None:
    """param_struct.pack_into(buffer, offset, *params), with torch's float32 rounding of
    scalars: a float beyond float32's range packs as +-inf (``x * 1e300`` is inf, as in torch)
    where struct refuses it. The check runs only after struct has refused (the hot path is
    one pack_into call)."""
    try:
        param_struct.pack_into(buffer, offset, *params)
    except OverflowError:
        rounded = [math.copysign(math.inf, v) if isinstance(v, float) and abs(v) > _F32_MAX else v
                   for v in params]
        param_struct.pack_into(buffer, offset, *rounded)
