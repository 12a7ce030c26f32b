"""The ONNX graph being built: nodes, initializers, inputs, outputs, and each value's element type."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .. import dtypes

# anygpu dtype -> ONNX element type, and the numpy type its values are written in.
_ELEM = {
    dtypes.float32: TensorProto.FLOAT, dtypes.float16: TensorProto.FLOAT16, dtypes.float64: TensorProto.DOUBLE, dtypes.int32: TensorProto.INT32, dtypes.int64: TensorProto.INT64,
    dtypes.bool: TensorProto.BOOL,
}
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE)


def elem_type(dtype) -> int:
    """The ONNX element type of an anygpu dtype."""
    if dtype not in _ELEM:
        raise ValueError(f"onnx.export: tensors of dtype {dtype} do not export (float32, float16, float64, "
                         f"int32, int64 and bool do)")
    return _ELEM[dtype]


def numpy_type(elem: int) -> np.dtype:
    return helper.tensor_dtype_to_np_dtype(elem)


class Graph:
    """Builds one ONNX graph. Every value has a unique name and a known element type
    (`types`), so the mappings can insert the Casts that ONNX's strict typing needs."""

    def __init__(self, opset: int):
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.types: dict[str, int] = {}
        self._used: set[str] = set()
        self._count = 0

    def fresh(self, hint: str) -> str:
        """A value name not used before, from `hint`."""
        name = hint
        while name in self._used:
            self._count += 1
            name = f"{hint}_{self._count}"
        self._used.add(name)
        return name

    def claim(self, name: str) -> str:
        """Reserve an exact name (a graph input, output or parameter); it must be unused."""
        if name in self._used:
            raise ValueError(f"onnx.export: the name {name!r} is used twice (input/output names and "
                             f"parameter names must be distinct)")
        self._used.add(name)
        return name

    def node(self, op_type: str, inputs: Sequence[str], attrs: dict[str, Any] | None = None,
             outputs: int = 1, out_type: int | None = None, hint: str | None = None):
        """Append a node; return its output name (or the list of them when outputs > 1). The
        outputs' element type is out_type, else that of the first input."""
        names = [self.fresh(hint or op_type.lower()) for _ in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, **(attrs or {})))
        kind = out_type if out_type is not None else self.types.get(inputs[0]) if inputs else None
        for name in names:
            if kind is not None:
                self.types[name] = kind
        return names[0] if outputs == 1 else names

    def initializer(self, name: str, array: np.ndarray, elem: int) -> str:
        array = np.array(array, dtype=numpy_type(elem), order="C")  # (ascontiguousarray makes 0-d 1-d)
        self.initializers.append(numpy_helper.from_array(array, name))
        self.types[name] = elem
        return name

    def const(self, value, elem: int, hint: str = "const") -> str:
        """A constant (an initializer) holding `value` as element type `elem`."""
        return self.initializer(self.fresh(hint), np.asarray(value), elem)

    def ints(self, values: Sequence[int], hint: str = "ints") -> str:
        """A 1-D int64 constant (axes, shapes, pads as ONNX takes them as inputs)."""
        return self.const(np.asarray(list(values), dtype=np.int64).reshape(-1), TensorProto.INT64, hint)

    def cast(self, name: str, elem: int) -> str:
        """`name` as element type `elem` (itself when it already is)."""
        if self.types.get(name) == elem:
            return name
        return self.node("Cast", [name], {"to": elem}, out_type=elem)

    def value_info(self, name: str, elem: int, shape: Sequence[Any]) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, elem, list(shape))
