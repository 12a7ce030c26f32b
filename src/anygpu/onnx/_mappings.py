"""What each traced op becomes in ONNX.

A mapping is called as ``mapping(tracer, out, args)`` after the op ran: `out` is what the op
returned, `args` its arguments by parameter name (defaults filled in). It emits nodes and
binds `out` (each tensor in it) to the name of the value that holds it. `METHODS` is keyed
by Tensor method name, `FUNCTIONS` by ``tensor.<name>`` (functions of anygpu.tensor),
``F.<name>`` (anygpu.nn.functional) or ``torch.<name>`` (anygpu.functions).

Shapes: reshapes write 0 ("copy this dim") for the leading dims they keep and -1 for the
first one they change, and expands write 1 where the input's dim already has the size, so
a batch dim named in dynamic_axes stays free through Flatten, view(n, -1), head splits and
merges. Other sizes are the traced ones.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
from onnx import TensorProto

from ._graph import FLOAT_TYPES, elem_type
from ._trace import Tracer, unsupported

Args = dict[str, Any]
Mapping = Callable[[Tracer, Any, Args], None]

INT64_MAX = 2**63 - 1


# ===================================================================== helpers

def _first(args: Args):
    return next(iter(args.values()))


def _values(args: Args) -> list:
    return list(args.values())


def _is_tensor(value) -> bool:
    from ..tensor import Tensor
    return isinstance(value, Tensor)


def _result(tr: Tracer, out, name: str) -> None:
    """Bind out to name, cast to out's element type where the node gave another."""
    want = elem_type(out.dtype)
    if tr.graph.types.get(name) != want:
        name = tr.graph.cast(name, want)
    tr.bind(out, name)


def _operand(tr: Tracer, value, elem: int) -> str:
    """A tensor or Python number as element type elem."""
    if _is_tensor(value):
        return tr.graph.cast(tr.name(value), elem)
    return tr.name(value, elem)


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def _dims(dim, ndim: int) -> list[int] | None:
    if dim is None:
        return None
    if isinstance(dim, (tuple, list)):
        return sorted(_dim(int(d), ndim) for d in dim)
    return [_dim(int(dim), ndim)]


def _tuple(value, n: int) -> list[int]:
    if isinstance(value, (tuple, list)):
        if len(value) == 1:
            return [int(value[0])] * n
        return [int(v) for v in value]
    return [int(value)] * n


def reshape_target(in_shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Reshape's shape input: 0 for the leading dims kept, -1 for the first one changed."""
    target = [int(s) for s in out_shape]
    keep = 0
    while keep < min(len(in_shape), len(out_shape)) and in_shape[keep] == out_shape[keep] and out_shape[keep]:
        target[keep] = 0
        keep += 1
    if keep < len(target) and all(s != 0 for s in out_shape):
        target[keep] = -1
    return target


def _reshape(tr: Tracer, name: str, in_shape, out_shape) -> str:
    if tuple(in_shape) == tuple(out_shape):
        return name
    return tr.graph.node("Reshape", [name, tr.graph.ints(reshape_target(in_shape, out_shape))])


def _unsqueeze(tr: Tracer, name: str, axes: Sequence[int]) -> str:
    if tr.graph.opset < 13:  # axes an attribute before opset 13
        return tr.graph.node("Unsqueeze", [name], {"axes": list(axes)})
    return tr.graph.node("Unsqueeze", [name, tr.graph.ints(axes)])


def _squeeze(tr: Tracer, name: str, axes: Sequence[int]) -> str:
    if tr.graph.opset < 13:
        return tr.graph.node("Squeeze", [name], {"axes": list(axes)})
    return tr.graph.node("Squeeze", [name, tr.graph.ints(axes)])


def _reduce(tr: Tracer, op: str, name: str, axes: list[int] | None, keepdims: bool) -> str:
    """A Reduce* node: axes as an input where the opset takes them so (ReduceSum from 13,
    the others from 18), else as an attribute; None reduces every dim."""
    g = tr.graph
    attrs = {"keepdims": int(bool(keepdims))}
    if axes is None:
        return g.node(op, [name], attrs)
    if (op == "ReduceSum" and g.opset >= 13) or g.opset >= 18:
        return g.node(op, [name, g.ints(axes)], attrs)
    return g.node(op, [name], {**attrs, "axes": list(axes)})


def _common_elem(tr: Tracer, *values) -> int:
    """The element type two compared operands meet in (torch's promotion, roughly)."""
    elems = [tr.graph.types.get(tr.name(v)) if _is_tensor(v) else None for v in values]
    floats = [e for e in elems if e in FLOAT_TYPES]
    if floats:
        return floats[0]
    if any(isinstance(v, float) for v in values):
        return TensorProto.FLOAT
    ints = [e for e in elems if e in (TensorProto.INT32, TensorProto.INT64)]
    if ints:
        return TensorProto.INT64 if TensorProto.INT64 in ints else ints[0]
    if all(e == TensorProto.BOOL for e in elems if e is not None):
        return TensorProto.BOOL
    return TensorProto.INT64


# ===================================================================== elementwise

def _binary(op: str, reverse: bool = False) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        a, b = _values(args)[:2]
        if reverse:
            a, b = b, a
        elem = elem_type(out.dtype)
        _result(tr, out, tr.graph.node(op, [_operand(tr, a, elem), _operand(tr, b, elem)]))
    return emit


def _compare(op: str, negate: bool = False, reverse: bool = False) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        a, b = _values(args)[:2]
        if reverse:
            a, b = b, a
        elem = _common_elem(tr, a, b)
        if elem == TensorProto.BOOL and op != "Equal":
            elem = TensorProto.INT32
        g = tr.graph
        operands = [_operand(tr, a, elem), _operand(tr, b, elem)]
        if op in ("LessOrEqual", "GreaterOrEqual") and g.opset < 12:  # not in opset 11: Less|Equal
            strict = g.node(op.replace("OrEqual", ""), operands, out_type=TensorProto.BOOL)
            name = g.node("Or", [strict, g.node("Equal", operands, out_type=TensorProto.BOOL)])
        else:
            name = g.node(op, operands, out_type=TensorProto.BOOL)
        if negate:
            name = tr.graph.node("Not", [name])
        _result(tr, out, name)
    return emit


def _logical(op: str, bitwise: str | None = None) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        if bitwise is not None and out.dtype.name != "bool":
            raise unsupported(bitwise, "bitwise ops on integers")
        operands = [_operand(tr, v, TensorProto.BOOL) for v in _values(args)[:2 if op != "Not" else 1]]
        _result(tr, out, tr.graph.node(op, operands, out_type=TensorProto.BOOL))
    return emit


def _unary_by_name(tr: Tracer, out, args: Args) -> None:
    """anygpu's unary kernels by name (tensor._unary / tensor.unary_op): alpha and beta are
    the op's parameters (leaky_relu's slope, elu's alpha, softplus' beta and threshold,
    clamp's bounds)."""
    g = tr.graph
    name, x, alpha, beta = args["name"], args["x"], args["alpha"], args["beta"]
    elem = elem_type(out.dtype)
    xn = g.cast(tr.name(x), elem)
    simple = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "log": "Log", "sqrt": "Sqrt",
              "abs": "Abs", "neg": "Neg", "reciprocal": "Reciprocal", "floor": "Floor", "ceil": "Ceil",
              "round": "Round", "sign": "Sign", "erf": "Erf", "sin": "Sin", "cos": "Cos", "atan": "Atan",
              "asin": "Asin", "acos": "Acos", "tan": "Tan", "sinh": "Sinh", "cosh": "Cosh"}

    def const(value) -> str:
        return g.const(np.asarray(value), elem)

    if name in simple:
        y = g.node(simple[name], [xn])
    elif name == "square":
        y = g.node("Mul", [xn, xn])
    elif name == "silu":
        y = g.node("Mul", [xn, g.node("Sigmoid", [xn])])
    elif name == "gelu":  # x/2 (1 + erf(x / sqrt 2))
        erf = g.node("Erf", [g.node("Mul", [xn, const(1.0 / math.sqrt(2.0))])])
        y = g.node("Mul", [g.node("Mul", [xn, const(0.5)]), g.node("Add", [erf, const(1.0)])])
    elif name == "gelu_tanh":  # x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
        cube = g.node("Mul", [g.node("Mul", [xn, xn]), xn])
        inner = g.node("Mul", [g.node("Add", [xn, g.node("Mul", [cube, const(0.044715)])]),
                               const(math.sqrt(2.0 / math.pi))])
        y = g.node("Mul", [g.node("Mul", [xn, const(0.5)]), g.node("Add", [g.node("Tanh", [inner]), const(1.0)])])
    elif name == "leaky_relu":
        y = g.node("LeakyRelu", [xn], {"alpha": float(alpha)})
    elif name == "elu":
        y = g.node("Elu", [xn], {"alpha": float(alpha)})
    elif name == "softplus":  # log(1 + exp(beta x)) / beta, x itself where beta x > threshold
        scaled = g.node("Mul", [xn, const(float(alpha))])
        soft = g.node("Div", [g.node("Softplus", [scaled]), const(float(alpha))])
        linear = g.node("Greater", [scaled, const(float(beta))], out_type=TensorProto.BOOL)
        y = g.node("Where", [linear, xn, soft])
    elif name == "clamp":
        lo = "" if alpha is None or alpha == -math.inf else const(alpha)
        hi = "" if beta is None or beta == math.inf else const(beta)
        y = g.node("Clip", [xn, lo, hi])
    elif name == "log1p":
        y = g.node("Log", [g.node("Add", [xn, const(1.0)])])
    elif name == "trunc":
        negative = g.node("Less", [xn, const(0.0)], out_type=TensorProto.BOOL)
        y = g.node("Where", [negative, g.node("Ceil", [xn]), g.node("Floor", [xn])])
    else:
        raise unsupported(name)
    _result(tr, out, y)


def _where(tr: Tracer, out, args: Args) -> None:
    condition, a, b = args["condition"], args["a"], args["b"]
    if a is None or b is None:
        raise unsupported("where", "where(condition) alone is nonzero: data-dependent")
    elem = elem_type(out.dtype)
    cond = _operand(tr, condition, TensorProto.BOOL)
    _result(tr, out, tr.graph.node("Where", [cond, _operand(tr, a, elem), _operand(tr, b, elem)]))


# ===================================================================== matmul, linear, casts

def _matmul(tr: Tracer, out, args: Args) -> None:
    a, b = _values(args)[:2]
    elem = elem_type(out.dtype)
    _result(tr, out, tr.graph.node("MatMul", [_operand(tr, a, elem), _operand(tr, b, elem)]))


def _rmatmul(tr: Tracer, out, args: Args) -> None:
    a, b = _values(args)[:2]
    _matmul(tr, out, {"a": b, "b": a})


def _linear(tr: Tracer, out, args: Args) -> None:
    g = tr.graph
    x, weight, bias = args["input"], args["weight"], args["bias"]
    xn, wn = tr.name(x), tr.name(weight)
    if x.ndim == 2:
        inputs = [xn, wn] + ([tr.name(bias)] if bias is not None else [])
        _result(tr, out, g.node("Gemm", inputs, {"transB": 1}))
        return
    y = g.node("MatMul", [xn, g.node("Transpose", [wn], {"perm": [1, 0]})])
    if bias is not None:
        y = g.node("Add", [y, tr.name(bias)])
    _result(tr, out, y)


def _identity(tr: Tracer, out, args: Args) -> None:
    """contiguous, clone, detach, cpu, cuda: the same values."""
    x = _first(args)
    if out is not x:
        _result(tr, out, tr.graph.node("Identity", [tr.name(x)]))


def _to(tr: Tracer, out, args: Args) -> None:
    """Tensor.to: a Cast when the dtype changes (devices are all the one adapter)."""
    x = _first(args)
    if out is x:
        return
    _result(tr, out, tr.graph.cast(tr.name(x), elem_type(out.dtype)) if out.dtype is not x.dtype
            else tr.graph.node("Identity", [tr.name(x)]))


def _inplace(tr: Tracer, out, args: Args) -> None:
    """x takes result's values: later uses of x read the result's value."""
    x, result = args["x"], args["result"]
    tr.bind(x, tr.graph.cast(tr.name(result), elem_type(x.dtype)), dynamic=tr.dynamic(result))


# ===================================================================== shapes

def _reshape_like(tr: Tracer, out, args: Args) -> None:
    """reshape / view / flatten / unflatten: Reshape to out's shape."""
    x = _first(args)
    if out is x:
        return
    name = _reshape(tr, tr.name(x), x.shape, out.shape)
    _result(tr, out, name if name != tr.name(x) else tr.graph.node("Identity", [name]))


def _squeeze_method(tr: Tracer, out, args: Args) -> None:
    x, dim = args["self"], args["dim"]
    if out.ndim == x.ndim:
        _identity(tr, out, {"x": x})
        return
    axes = [d for d in (_dims(dim, x.ndim) or range(x.ndim)) if x.shape[d] == 1]
    _result(tr, out, _squeeze(tr, tr.name(x), axes))


def _unsqueeze_method(tr: Tracer, out, args: Args) -> None:
    x, dim = args["self"], int(args["dim"])
    _result(tr, out, _unsqueeze(tr, tr.name(x), [_dim(dim, out.ndim)]))


def _permute(tr: Tracer, out, args: Args) -> None:
    x, dims = _values(args)[:2]
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = dims[0]
    _transpose_to(tr, out, x, [_dim(int(d), x.ndim) for d in dims])


def _transpose(tr: Tracer, out, args: Args) -> None:
    """transpose(d0, d1) / swapaxes; t() with no dims (a 2-D transpose, the identity below 2-D)."""
    values = _values(args)
    x = values[0]
    perm = list(range(x.ndim))
    if len(values) >= 3:
        d0, d1 = _dim(int(values[1]), x.ndim), _dim(int(values[2]), x.ndim)
        perm[d0], perm[d1] = perm[d1], perm[d0]
    else:
        perm.reverse()
    _transpose_to(tr, out, x, perm)


def _transpose_to(tr: Tracer, out, x, perm: list[int]) -> None:
    if out is x:
        return
    if perm == list(range(x.ndim)):
        _result(tr, out, tr.graph.node("Identity", [tr.name(x)]))
        return
    _result(tr, out, tr.graph.node("Transpose", [tr.name(x)], {"perm": perm}))


def _narrow(tr: Tracer, out, args: Args) -> None:
    x, dim, start, length = _values(args)[:4]
    d = _dim(int(dim), x.ndim)
    start = int(start) + (x.shape[d] if int(start) < 0 else 0)
    _getitem(tr, out, {"x": x, "index": (slice(None),) * d + (slice(start, start + int(length)),)})


def _expand(tr: Tracer, out, args: Args) -> None:
    x = _first(args)
    if out is x:
        return
    shape = list(out.shape)
    offset = out.ndim - x.ndim
    for i, size in enumerate(x.shape):  # 1 where the input has the size already: that dim stays free
        if size == shape[offset + i]:
            shape[offset + i] = 1
    _result(tr, out, tr.graph.node("Expand", [tr.name(x), tr.graph.ints(shape)]))


def _cat(tr: Tracer, out, args: Args) -> None:
    tensors, dim = list(args["tensors"]), int(args["dim"])
    elem = elem_type(out.dtype)
    names = [_operand(tr, t, elem) for t in tensors if not (t.ndim == 1 and t.shape[0] == 0 and out.ndim > 1)]
    _result(tr, out, tr.graph.node("Concat", names, {"axis": _dim(dim, out.ndim)}))


def _stack(tr: Tracer, out, args: Args) -> None:
    tensors, dim = list(args["tensors"]), int(args["dim"])
    elem = elem_type(out.dtype)
    axis = _dim(dim, out.ndim)
    names = [_unsqueeze(tr, _operand(tr, t, elem), [axis]) for t in tensors]
    _result(tr, out, tr.graph.node("Concat", names, {"axis": axis}))


def _index_constant(tr: Tracer, index) -> str:
    if _is_tensor(index):
        name = tr.name(index)
        return name if tr.graph.types.get(name) in (TensorProto.INT32, TensorProto.INT64) \
            else tr.graph.cast(name, TensorProto.INT64)
    return tr.graph.const(np.asarray(index, dtype=np.int64), TensorProto.INT64, "index")


def _index_select(tr: Tracer, out, args: Args) -> None:
    x, dim, index = _values(args)[:3]
    name = tr.graph.node("Gather", [tr.name(x), _index_constant(tr, index)], {"axis": _dim(int(dim), x.ndim)})
    _result(tr, out, _reshape(tr, name, _gathered_shape(x.shape, int(dim), index), out.shape))


def _gathered_shape(shape, dim: int, index) -> tuple:
    index_shape = tuple(index.shape) if _is_tensor(index) else np.asarray(index).shape
    d = _dim(dim, len(shape))
    return tuple(shape[:d]) + index_shape + tuple(shape[d + 1:])


def _gather(tr: Tracer, out, args: Args) -> None:
    x, dim, index = _values(args)[:3]
    _result(tr, out, tr.graph.node("GatherElements", [tr.name(x), _index_constant(tr, index)],
                                   {"axis": _dim(int(dim), x.ndim)}))


def _getitem(tr: Tracer, out, args: Args) -> None:
    """Basic indexing (ints, slices with positive steps, None, Ellipsis) as Slice, Squeeze and
    Unsqueeze; one integer-tensor (or list) index among slices as a Gather."""
    g = tr.graph
    x, index = _values(args)[:2]
    items = list(index) if isinstance(index, tuple) else [index]
    advanced = [i for i, item in enumerate(items) if _is_tensor(item) or isinstance(item, (list, np.ndarray))]
    consumed = sum(1 for item in items if item is not None and item is not Ellipsis)
    ellipsis = [i for i, item in enumerate(items) if item is Ellipsis]  # `is`: == on a tensor is an op
    if ellipsis:
        items[ellipsis[0]:ellipsis[0] + 1] = [slice(None)] * (x.ndim - consumed)
    items += [slice(None)] * (x.ndim - sum(1 for item in items if item is not None))
    if advanced:
        if len(advanced) > 1 or any(item is None or isinstance(item, int) for item in items):
            raise unsupported("index", "more than one tensor index, or a tensor index with ints or None")
        tensor_item = next(item for item in items if _is_tensor(item) or isinstance(item, (list, np.ndarray)))
        is_mask = (tensor_item.dtype.name == "bool" if _is_tensor(tensor_item)
                   else np.asarray(tensor_item).dtype == np.bool_)
        if is_mask:
            raise unsupported("index", "a boolean mask index is data-dependent")
    starts, ends, axes, steps, squeeze, unsqueeze = [], [], [], [], [], []
    dim = out_dim = 0
    gather_dim = None
    for item in items:
        if item is None:
            unsqueeze.append(out_dim)
            out_dim += 1
            continue
        if isinstance(item, slice):
            if item != slice(None):
                step = 1 if item.step is None else int(item.step)
                if step < 1:
                    raise unsupported("index", f"slice step {step}")
                starts.append(0 if item.start is None else int(item.start))
                ends.append(INT64_MAX if item.stop is None else int(item.stop))
                axes.append(dim)
                steps.append(step)
            out_dim += 1
        elif _is_tensor(item) or isinstance(item, (list, np.ndarray)):
            gather_dim = dim
            out_dim += 1
        else:
            position = int(item)
            starts.append(position)
            ends.append(INT64_MAX if position == -1 else position + 1)
            axes.append(dim)
            steps.append(1)
            squeeze.append(dim)
        dim += 1
    name = tr.name(x)
    if axes:
        name = g.node("Slice", [name, g.ints(starts), g.ints(ends), g.ints(axes), g.ints(steps)])
    if squeeze:
        name = _squeeze(tr, name, squeeze)
    if gather_dim is not None:
        tensor_item = items[gather_dim]
        name = g.node("Gather", [name, _index_constant(tr, tensor_item)], {"axis": gather_dim})
    if unsqueeze:
        name = _unsqueeze(tr, name, unsqueeze)
    if name == tr.name(x):
        name = g.node("Identity", [name])
    _result(tr, out, name)


# ===================================================================== reductions

def _sum_or_mean(op: str) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        x = args["self"]
        dim, keepdim = args.get("dim"), args.get("keepdim", False)
        elem = elem_type(out.dtype)
        name = tr.graph.cast(tr.name(x), elem)
        if x.ndim == 0:
            _result(tr, out, tr.graph.node("Identity", [name]))
            return
        _result(tr, out, _reduce(tr, op, name, _dims(dim, x.ndim), keepdim))
    return emit


def _extreme(op: str, arg_op: str, elementwise: str) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        x, dim, keepdim = args["self"], args.get("dim"), args.get("keepdim", False)
        if _is_tensor(dim):
            _binary(elementwise)(tr, out, {"a": x, "b": dim})
            return
        name = tr.name(x)
        if dim is None:
            _result(tr, out, _reduce(tr, op, name, None, False) if x.ndim else tr.graph.node("Identity", [name]))
            return
        if x.ndim == 0:  # a 0-d tensor over dim 0: itself, and index 0 (left a constant)
            _result(tr, out[0], tr.graph.node("Identity", [name]))
            return
        d = _dim(int(dim), x.ndim)
        values, indices = out[0], out[1]
        _result(tr, values, _reduce(tr, op, name, [d], keepdim))
        picked = tr.graph.node(arg_op, [name], {"axis": d, "keepdims": int(bool(keepdim))},
                               out_type=TensorProto.INT64)
        _result(tr, indices, picked)
    return emit


def _amax(op: str) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        x, dim, keepdim = args["self"], args.get("dim"), args.get("keepdim", False)
        _result(tr, out, _reduce(tr, op, tr.name(x), _dims(dim, x.ndim) if dim not in ((), []) else None, keepdim))
    return emit


def _argext(op: str) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        x, dim, keepdim = args["self"], args.get("dim"), args.get("keepdim", False)
        name = tr.name(x)
        if dim is None:
            flat = tr.graph.node("Reshape", [name, tr.graph.ints([-1])])
            picked = tr.graph.node(op, [flat], {"axis": 0, "keepdims": 0}, out_type=TensorProto.INT64)
            if keepdim:
                picked = tr.graph.node("Reshape", [picked, tr.graph.ints([1] * x.ndim)])
        else:
            picked = tr.graph.node(op, [name], {"axis": _dim(int(dim), x.ndim), "keepdims": int(bool(keepdim))},
                                   out_type=TensorProto.INT64)
        _result(tr, out, picked)
    return emit


def _logsumexp(tr: Tracer, out, args: Args) -> None:
    x, dim, keepdim = _values(args)[:3]
    _result(tr, out, _reduce(tr, "ReduceLogSumExp", tr.name(x), _dims(dim, x.ndim), keepdim))


def _softmax_op(op: str, implicit: bool) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        values = _values(args)
        x, dim = values[0], values[1]
        if dim is None:
            if not implicit:
                raise unsupported(op, "dim=None")
            dim = 0 if x.ndim in (0, 1, 3) else 1
        name = tr.graph.cast(tr.name(x), elem_type(out.dtype))
        if x.ndim == 0:
            y = tr.graph.node("Identity", [name]) if op == "Softmax" else tr.graph.node("Sub", [name, name])
            _result(tr, out, y if op == "LogSoftmax" else tr.graph.node("Div", [name, name]))
            return
        axis = _dim(int(dim), x.ndim)
        if tr.graph.opset < 13 and axis != x.ndim - 1:  # before 13 Softmax flattens from axis on
            perm = list(range(x.ndim))
            perm[axis], perm[-1] = perm[-1], perm[axis]
            moved = tr.graph.node("Transpose", [name], {"perm": perm})
            done = tr.graph.node(op, [moved], {"axis": x.ndim - 1})
            _result(tr, out, tr.graph.node("Transpose", [done], {"perm": perm}))
            return
        _result(tr, out, tr.graph.node(op, [name], {"axis": axis}))
    return emit


# ===================================================================== nn.functional

def _unbatched(tr: Tracer, x, spatial: int) -> tuple[str, bool]:
    if x.ndim == spatial + 1:
        return _unsqueeze(tr, tr.name(x), [0]), True
    return tr.name(x), False


def _conv(spatial: int, transposed: bool) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        x, weight, bias = args["input"], args["weight"], args["bias"]
        stride, dilation = _tuple(args["stride"], spatial), _tuple(args["dilation"], spatial)
        kernel = list(weight.shape[2:])
        padding = args["padding"]
        if isinstance(padding, str):
            if padding == "valid":
                pads = [0] * (2 * spatial)
            else:  # 'same': torch puts the odd extra row/column at the end
                total = [d * (k - 1) for d, k in zip(dilation, kernel)]
                pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            pads = _tuple(padding, spatial) * 2
        name, unbatched = _unbatched(tr, x, spatial)
        inputs = [name, tr.name(weight)] + ([tr.name(bias)] if bias is not None else [])
        attrs = {"kernel_shape": kernel, "strides": stride, "dilations": dilation, "group": int(args["groups"]),
                 "pads": pads}
        if transposed:
            attrs["output_padding"] = _tuple(args["output_padding"], spatial)
        y = tr.graph.node("ConvTranspose" if transposed else "Conv", inputs, attrs)
        _result(tr, out, _squeeze(tr, y, [0]) if unbatched else y)
    return emit


def _batch_norm(tr: Tracer, out, args: Args) -> None:
    x, mean, var = args["input"], args["running_mean"], args["running_var"]
    if args["training"] or mean is None or var is None:
        raise unsupported("batch_norm", "training mode (batch statistics); export calls model.eval(), "
                          "and a functional batch_norm needs training=False and running statistics")
    channels = x.shape[1]
    elem = elem_type(x.dtype)
    g = tr.graph
    scale = tr.name(args["weight"]) if args["weight"] is not None else g.const(np.ones(channels), elem)
    shift = tr.name(args["bias"]) if args["bias"] is not None else g.const(np.zeros(channels), elem)
    _result(tr, out, g.node("BatchNormalization", [tr.name(x), scale, shift, tr.name(mean), tr.name(var)],
                            {"epsilon": float(args["eps"])}))


def _layer_norm(tr: Tracer, out, args: Args) -> None:
    g = tr.graph
    x, shape, weight, bias, eps = args["input"], args["normalized_shape"], args["weight"], args["bias"], args["eps"]
    shape = [int(shape)] if isinstance(shape, int) else [int(s) for s in shape]
    elem = elem_type(x.dtype)
    xn = tr.name(x)
    if g.opset >= 17:
        scale = tr.name(weight) if weight is not None else g.const(np.ones(shape), elem)
        inputs = [xn, scale] + ([tr.name(bias)] if bias is not None else [])
        _result(tr, out, g.node("LayerNormalization", inputs, {"axis": -len(shape), "epsilon": float(eps)}))
        return
    axes = list(range(x.ndim - len(shape), x.ndim))
    centered = g.node("Sub", [xn, _reduce(tr, "ReduceMean", xn, axes, True)])
    var = _reduce(tr, "ReduceMean", g.node("Mul", [centered, centered]), axes, True)
    y = g.node("Div", [centered, g.node("Sqrt", [g.node("Add", [var, g.const(np.asarray(eps), elem)])])])
    if weight is not None:
        y = g.node("Mul", [y, tr.name(weight)])
    if bias is not None:
        y = g.node("Add", [y, tr.name(bias)])
    _result(tr, out, y)


def _group_norm(tr: Tracer, out, args: Args) -> None:
    """(N, C, *) -> (N, G, rest), InstanceNormalization over rest, back, then weight and bias per channel."""
    g = tr.graph
    x, groups, weight, bias, eps = args["input"], int(args["num_groups"]), args["weight"], args["bias"], args["eps"]
    elem = elem_type(x.dtype)
    xn = tr.name(x)
    grouped = g.node("Reshape", [xn, g.ints([0, groups, -1])])
    normed = g.node("InstanceNormalization", [grouped, g.const(np.ones(groups), elem), g.const(np.zeros(groups), elem)],
                    {"epsilon": float(eps)})
    y = g.node("Reshape", [normed, g.node("Shape", [xn], out_type=TensorProto.INT64)])
    spread = list(range(1, x.ndim - 1))  # (C,) -> (C, 1, ..., 1)
    if weight is not None:
        y = g.node("Mul", [y, _unsqueeze(tr, tr.name(weight), spread) if spread else tr.name(weight)])
    if bias is not None:
        y = g.node("Add", [y, _unsqueeze(tr, tr.name(bias), spread) if spread else tr.name(bias)])
    _result(tr, out, y)


def _attention(tr: Tracer, out, args: Args) -> None:
    """softmax(q k^T * scale + mask) v, as MatMul, Mul, Add (or Where for a bool mask), Softmax, MatMul."""
    g = tr.graph
    q, k, v = args["query"], args["key"], args["value"]
    mask, dropout_p, is_causal, scale = args["attn_mask"], args["dropout_p"], args["is_causal"], args["scale"]
    if dropout_p:
        raise unsupported("scaled_dot_product_attention", "dropout_p > 0 (random); export in eval mode")
    elem = elem_type(out.dtype)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    perm = list(range(k.ndim - 2)) + [k.ndim - 1, k.ndim - 2]
    keys_t = g.node("Transpose", [tr.name(k)], {"perm": perm})
    scores = g.node("Mul", [g.node("MatMul", [tr.name(q), keys_t]), g.const(np.asarray(scale), elem)])
    length, source = q.shape[-2], k.shape[-2]
    if is_causal:
        causal = np.triu(np.full((length, source), -np.inf, np.float32), k=1)
        scores = g.node("Add", [scores, g.const(causal, elem, "causal_mask")])
    if mask is not None:
        if mask.dtype.is_floating_point:
            scores = g.node("Add", [scores, g.cast(tr.name(mask), elem)])
        else:  # nonzero: attend; zero: -inf
            keep = g.cast(tr.name(mask), TensorProto.BOOL)
            scores = g.node("Where", [keep, scores, g.const(np.asarray(-np.inf), elem)])
    probs = g.node("Softmax", [scores], {"axis": -1})
    _result(tr, out, g.node("MatMul", [probs, tr.name(v)]))


def _pool_args(args: Args, spatial: int):
    kernel = _tuple(args["kernel_size"], spatial)
    stride = args["stride"]
    stride = kernel if stride is None or stride == [] or stride == () else _tuple(stride, spatial)
    return kernel, stride, _tuple(args["padding"], spatial) * 2


def _max_pool(spatial: int) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        if args["return_indices"]:
            raise unsupported(f"max_pool{spatial}d", "return_indices=True")
        x = args["input"]
        kernel, stride, pads = _pool_args(args, spatial)
        name, unbatched = _unbatched(tr, x, spatial)
        y = tr.graph.node("MaxPool", [name], {"kernel_shape": kernel, "strides": stride, "pads": pads,
                                              "dilations": _tuple(args["dilation"], spatial),
                                              "ceil_mode": int(bool(args["ceil_mode"]))})
        _result(tr, out, _squeeze(tr, y, [0]) if unbatched else y)
    return emit


def _avg_pool(spatial: int) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        if args.get("divisor_override") is not None:
            raise unsupported(f"avg_pool{spatial}d", "divisor_override")
        x = args["input"]
        kernel, stride, pads = _pool_args(args, spatial)
        name, unbatched = _unbatched(tr, x, spatial)
        y = tr.graph.node("AveragePool", [name], {"kernel_shape": kernel, "strides": stride, "pads": pads,
                                                  "ceil_mode": int(bool(args["ceil_mode"])),
                                                  "count_include_pad": int(bool(args["count_include_pad"]))})
        _result(tr, out, _squeeze(tr, y, [0]) if unbatched else y)
    return emit


def _adaptive_avg_pool(spatial: int) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        x = args["input"]
        name, unbatched = _unbatched(tr, x, spatial)
        sizes, wanted = list(x.shape[-spatial:]), list(out.shape[-spatial:])
        if all(w == 1 for w in wanted):
            y = tr.graph.node("GlobalAveragePool", [name])
        elif all(w and s % w == 0 for s, w in zip(sizes, wanted)):
            kernel = [s // w for s, w in zip(sizes, wanted)]
            y = tr.graph.node("AveragePool", [name], {"kernel_shape": kernel, "strides": kernel})
        else:
            raise unsupported(f"adaptive_avg_pool{spatial}d", f"output size {wanted} does not divide input size {sizes}")
        _result(tr, out, _squeeze(tr, y, [0]) if unbatched else y)
    return emit


def _embedding(tr: Tracer, out, args: Args) -> None:
    if args["max_norm"] is not None:
        raise unsupported("embedding", "max_norm (renormalises the weight in place)")
    _result(tr, out, tr.graph.node("Gather", [tr.name(args["weight"]), _index_constant(tr, args["input"])],
                                   {"axis": 0}))


def _dropout(op: str) -> Mapping:
    def emit(tr: Tracer, out, args: Args) -> None:
        values = _values(args)
        x, p, training = values[0], values[1], values[2]
        if training and p:
            raise unsupported(op, "training=True is random; export in eval mode (model.eval())")
        _identity(tr, out, {"x": x})
    return emit


def _interpolate(tr: Tracer, out, args: Args) -> None:
    x, mode, scale_factor = args["input"], args["mode"], args["scale_factor"]
    if mode not in ("nearest", "nearest-exact"):
        raise unsupported("interpolate", f"mode {mode!r}")
    spatial = x.ndim - 2
    g = tr.graph
    xn = tr.name(x)
    if scale_factor is not None and not args.get("recompute_scale_factor"):
        factors = [float(s) for s in _tuple_float(scale_factor, spatial)]
        scales = g.const(np.asarray([1.0, 1.0] + factors, np.float32), TensorProto.FLOAT, "scales")
        resize_inputs = [xn, _empty_before_13(tr), scales]
    else:  # a size: the (N, C) of the input, then the spatial sizes (out/in as a float scale can round)
        leading = g.node("Slice", [g.node("Shape", [xn], out_type=TensorProto.INT64), g.ints([0]), g.ints([2])])
        sizes = g.node("Concat", [leading, g.ints(out.shape[2:])], {"axis": 0})
        resize_inputs = [xn, _empty_before_13(tr), _empty_before_13(tr), sizes]
    attrs = ({"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
             if mode == "nearest" else
             {"mode": "nearest", "coordinate_transformation_mode": "half_pixel", "nearest_mode": "round_prefer_ceil"})
    _result(tr, out, g.node("Resize", resize_inputs, attrs))


def _empty_before_13(tr: Tracer) -> str:
    """Resize's roi / scales left out: "" from opset 13, an empty tensor before."""
    if tr.graph.opset >= 13:
        return ""
    return tr.graph.const(np.zeros(0, np.float32), TensorProto.FLOAT, "empty")


def _tuple_float(value, n: int) -> list[float]:
    if isinstance(value, (tuple, list)):
        return [float(v) for v in value] if len(value) == n else [float(value[0])] * n
    return [float(value)] * n


def _pad(tr: Tracer, out, args: Args) -> None:
    x, pad, mode, value = args["input"], list(args["pad"]), args["mode"], args["value"]
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}
    if mode not in modes or (mode == "circular" and tr.graph.opset < 19):
        raise unsupported("pad", f"mode {mode!r}" + (" before opset 19" if mode == "circular" else ""))
    begins, ends = [0] * x.ndim, [0] * x.ndim
    for i in range(len(pad) // 2):
        d = x.ndim - 1 - i
        begins[d], ends[d] = int(pad[2 * i]), int(pad[2 * i + 1])
    g = tr.graph
    inputs = [tr.name(x), g.ints(begins + ends)]
    if mode == "constant":
        inputs.append(g.const(np.asarray(0.0 if value is None else value), elem_type(x.dtype)))
    _result(tr, out, g.node("Pad", inputs, {"mode": modes[mode]}))


# ===================================================================== tables

METHODS: dict[str, Mapping] = {
    "__add__": _binary("Add"), "__radd__": _binary("Add", reverse=True), "add": _binary("Add"),
    "__sub__": _binary("Sub"), "__rsub__": _binary("Sub", reverse=True), "sub": _binary("Sub"),
    "__mul__": _binary("Mul"), "__rmul__": _binary("Mul", reverse=True), "mul": _binary("Mul"),
    "__truediv__": _binary("Div"), "__rtruediv__": _binary("Div", reverse=True), "div": _binary("Div"),
    "true_divide": _binary("Div"),
    "__pow__": _binary("Pow"), "__rpow__": _binary("Pow", reverse=True), "pow": _binary("Pow"),
    "maximum": _binary("Max"), "minimum": _binary("Min"),
    "__eq__": _compare("Equal"), "eq": _compare("Equal"), "__ne__": _compare("Equal", negate=True),
    "ne": _compare("Equal", negate=True), "__lt__": _compare("Less"), "lt": _compare("Less"),
    "__le__": _compare("LessOrEqual"), "le": _compare("LessOrEqual"), "__gt__": _compare("Greater"),
    "gt": _compare("Greater"), "__ge__": _compare("GreaterOrEqual"), "ge": _compare("GreaterOrEqual"),
    "logical_not": _logical("Not"), "logical_and": _logical("And"), "logical_or": _logical("Or"),
    "logical_xor": _logical("Xor"), "__and__": _logical("And", "__and__"), "__or__": _logical("Or", "__or__"),
    "__xor__": _logical("Xor", "__xor__"), "__invert__": _logical("Not", "__invert__"),
    "__matmul__": _matmul, "__rmatmul__": _rmatmul, "matmul": _matmul, "mm": _matmul, "bmm": _matmul,
    "contiguous": _identity, "clone": _identity, "detach": _identity, "cpu": _identity, "cuda": _identity,
    "to": _to,
    "reshape": _reshape_like, "view": _reshape_like, "flatten": _reshape_like, "unflatten": _reshape_like,
    "view_as": _reshape_like, "reshape_as": _reshape_like,
    "squeeze": _squeeze_method, "unsqueeze": _unsqueeze_method,
    # the view ops also at the method level, so they stay mapped however the Tensor layer implements them
    "permute": _permute, "transpose": _transpose, "swapaxes": _transpose, "t": _transpose,
    "expand": _expand, "expand_as": _expand, "__getitem__": _getitem, "narrow": _narrow,
    "sum": _sum_or_mean("ReduceSum"), "mean": _sum_or_mean("ReduceMean"),
    "max": _extreme("ReduceMax", "ArgMax", "Max"), "min": _extreme("ReduceMin", "ArgMin", "Min"),
    "amax": _amax("ReduceMax"), "amin": _amax("ReduceMin"),
    "argmax": _argext("ArgMax"), "argmin": _argext("ArgMin"),
}

FUNCTIONS: dict[str, Mapping] = {
    "tensor._unary": _unary_by_name, "tensor.unary_op": _unary_by_name, "tensor._inplace": _inplace,
    "tensor.where": _where, "tensor.matmul": _matmul, "tensor.cat": _cat, "tensor.stack": _stack,
    "tensor.reshape": _reshape_like, "tensor.permute": _permute, "tensor.expand": _expand,
    "tensor.getitem": _getitem, "tensor.index_select": _index_select, "tensor.gather": _gather,
    "tensor.softmax": _softmax_op("Softmax", implicit=False),
    "tensor.log_softmax": _softmax_op("LogSoftmax", implicit=False),
    "tensor.logsumexp": _logsumexp,
    "F.linear": _linear,
    "F.conv1d": _conv(1, False), "F.conv2d": _conv(2, False),
    "F.conv_transpose1d": _conv(1, True), "F.conv_transpose2d": _conv(2, True),
    "F.batch_norm": _batch_norm, "F.layer_norm": _layer_norm, "F.group_norm": _group_norm,
    "F.softmax": _softmax_op("Softmax", implicit=True), "F.log_softmax": _softmax_op("LogSoftmax", implicit=True),
    "F.scaled_dot_product_attention": _attention,
    "F.max_pool1d": _max_pool(1), "F.max_pool2d": _max_pool(2),
    "F.avg_pool1d": _avg_pool(1), "F.avg_pool2d": _avg_pool(2),
    "F.adaptive_avg_pool1d": _adaptive_avg_pool(1), "F.adaptive_avg_pool2d": _adaptive_avg_pool(2),
    "F.embedding": _embedding,
    "F.dropout": _dropout("dropout"), "F.dropout1d": _dropout("dropout1d"), "F.dropout2d": _dropout("dropout2d"),
    "F.interpolate": _interpolate, "F.pad": _pad,
}
