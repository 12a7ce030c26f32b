"""Elementwise math: dtype promotion, casts, unary and binary ops (float and exact integer),
comparisons, autocast of operands."""

from __future__ import annotations


import operator
import threading

import numpy as np

from .. import dtypes
from ..autograd.rules import backward as rule
from ..dtypes import float16, float64, int64, promote
from ..ops import gpu, intmath

from .core import Tensor, _BUF_DTYPE, _check_half, _is_int, bool_
from .recording import _attach, _record
from .creation import full, tensor

# Autocast lives above this package (anygpu.amp) and registers its per-thread region state
# and its op policy here when imported (`register_autocast`); until then no region exists.
_autocast_state = threading.local()
_autocast_policy = None


def register_autocast(state: threading.local, policy) -> None:
    """Install autocast's thread-local region state and `policy(op) -> dtype or None`."""
    global _autocast_state, _autocast_policy
    _autocast_state, _autocast_policy = state, policy


def _autocast(op: str, *operands):
    """The operands as autocast wants them for `op` (amp.policy): float tensors converted
    to float16 (matmul-type ops) or float32 (reductions, softmax, exp/log/pow), through
    recorded conversions; unchanged outside autocast and for other ops."""
    want = _autocast_policy(op) if _autocast_state.__dict__ else None
    if want is None:
        return operands
    return tuple(_autocast_cast(t, want) if isinstance(t, Tensor) and t.dtype.is_floating_point
                 and t.dtype is not want else t for t in operands)


def _autocast_cast(t: Tensor, dtype) -> Tensor:
    """t converted to `dtype` by autocast (here and in nn.functional's policy). Inside a
    caching region (amp.autocast) the float16 copy of a float32 leaf that requires grad (a
    master weight) is made once and every use shares it, with its one recorded conversion,
    while t's version stays (torch's autocast cache; the region drops it when it ends). One
    copy per grad mode: a copy made under no_grad has no grad_fn."""
    cache = getattr(_autocast_state, "cache", None)
    if (cache is None or dtype is not float16 or t.dtype is not dtypes.float32 or not t.requires_grad
            or t._entry is not None or t._base is not None):
        return _cast(t, dtype)
    from .grad_mode import is_grad_enabled
    grad_mode = is_grad_enabled()
    out = _autocast_copy(cache, t, grad_mode)
    if out is None:
        out = _cast(t, dtype)
        _keep_autocast_copy(cache, t, grad_mode, out)
    return out


def _autocast_copy(cache: dict, t: Tensor, grad_mode: bool) -> Tensor | None:
    """The region's float16 copy of t under this grad mode, None where there is none or it is
    stale. (t itself is held, so its id names it until the region ends; a copy changed in
    place by its user is not handed out again.)"""
    hit = cache.get((id(t), grad_mode))
    return hit[2] if hit is not None and hit[1] == t._version and hit[2]._version == hit[3] else None


def _keep_autocast_copy(cache: dict, t: Tensor, grad_mode: bool, out: Tensor) -> None:
    cache[(id(t), grad_mode)] = (t, t._version, out, out._version)


def _to_tensor(value, like: Tensor | None = None) -> Tensor:
    """A Tensor for an operand: Python numbers become 0-d tensors of their own kind
    (bool, int64 or the default float dtype), so integer arithmetic stays integer; a float
    beside a float64 tensor (`like`) becomes float64, so it is not rounded to float32."""
    if isinstance(value, Tensor):
        return value
    if isinstance(value, (bool, np.bool_)):
        return full((), bool(value), dtype=bool_)
    if isinstance(value, (int, np.integer)):
        _refuse_wide_int("an integer operand", value)
        return full((), int(value), dtype=int64)
    if isinstance(value, (float, np.floating)):
        wide = like is not None and like.dtype is float64
        return full((), float(value), dtype=float64 if wide else None)
    return tensor(value)


def _number_dtype(value) -> dtypes.dtype:
    if isinstance(value, (bool, np.bool_)):
        return bool_
    return int64 if isinstance(value, (int, np.integer)) else dtypes.default_float()


def _result_dtype(a, b) -> dtypes.dtype:
    """torch's type promotion for a binary op: a tensor of higher category (bool < int <
    float) wins; a Python number or 0-d tensor only lifts the category, not the width."""
    def rank(dt):
        return 2 if dt.is_floating_point else 1 if _is_int(dt) else 0

    def strength(x):  # a tensor with dims > a 0-d tensor > a Python number
        return 0 if not isinstance(x, Tensor) else 1 if x.ndim == 0 else 2

    da = a.dtype if isinstance(a, Tensor) else _number_dtype(a)
    db = b.dtype if isinstance(b, Tensor) else _number_dtype(b)
    if strength(a) == strength(b):
        return promote(da, db)
    (strong, strong_dt), (weak, weak_dt) = sorted(((a, da), (b, db)), key=lambda p: -strength(p[0]))
    if rank(weak_dt) <= rank(strong_dt):
        return strong_dt
    if isinstance(weak, Tensor):
        return weak_dt
    return dtypes.default_float() if rank(weak_dt) == 2 else int64


def _float_operand(t: Tensor):
    """t's elements as float Buffer: f32 (float64 tensors keep their f64 host Buffer)."""
    buf = t._buf  # (once: a strided view gathers on each read)
    return buf if buf.dtype == "f32" or buf.dtype == "f64" else gpu().cast(buf, "f32")


def _float_operands(*tensors: Tensor, wide: bool = False) -> tuple:
    """The Buffers an elementwise float kernel reads: the f16 Buffers themselves when every
    operand is float16 (f16 storage, f32 math, the result rounded to f16 once: torch's half
    kernels, without converted copies), else each operand as f32 (mixed float16/float32
    computes in float32, as torch promotes). wide: the result is float64, so every operand
    becomes an f64 host Buffer (computed in numpy)."""
    bufs = tuple(t._buf for t in tensors)
    if wide or (bufs[0].dtype == "f64" and all(buf.dtype == "f64" for buf in bufs)):  # (f32: one test)
        return tuple(buf if buf.dtype == "f64" else gpu().cast(buf, "f64") for buf in bufs)
    if all(buf.dtype == "f16" for buf in bufs):
        return bufs
    return tuple(buf if buf.dtype == "f32" else gpu().cast(buf, "f32") for buf in bufs)


def _int_operand(t: Tensor):
    """t's elements as an i32 Buffer (bool's 0/1 words converted)."""
    buf = t._buf
    return buf if buf.dtype == "i32" else gpu().cast(buf, "i32")


def _cast(x: Tensor, dtype, copy: bool = False) -> Tensor:
    """x converted to `dtype` (a new tensor unless the dtype is x's already): float -> int
    truncates toward zero, anything -> bool is `!= 0`, as torch."""
    if dtype is x.dtype:
        return x.clone() if copy else x
    dev = gpu()
    if dtype is bool_:
        return _compare("ne", x, 0)
    if dtype.is_floating_point:
        store = _BUF_DTYPE[dtype]
        if dtype is float16:
            _check_half("to")
        if x._view is not None and x.dtype.is_floating_point and {x._base._buf.dtype, store} == {"f32", "f16"}:
            # A strided view (autocast's q, k, v: head-split transposes) gathered and
            # converted by one kernel, not a gather and then a cast.
            source = x._base._buf
            buf = dev.strided_gather(source, x.shape, *x._view, dtype=store)
        else:
            source = x._buf  # (read once: a strided view gathers on each read)
            buf = (source if x._view is not None else dev.copy(source)) if source.dtype == store else \
                dev.cast(source, store)
        out = Tensor(buf, x.shape, dtype)
        if not x.dtype.is_floating_point:
            return out
        source = source.dtype  # float <-> float: the gradient goes back converted to x's dtype
        return _attach("to", out, (x,), rule("to", dev, source))
    source = x._buf
    if source.dtype == "i32":
        buf = source if x._view is not None else dev.copy(source)
    elif dtype is int64 and source.dtype in ("f32", "f16"):  # 3e9 or NaN would not wrap silently
        buf = dev.cast_to_int(source)
    else:
        buf = dev.cast(source, "i32")
    out = Tensor(buf, x.shape, dtype)
    out._host = x._host if _is_int(x.dtype) else None
    return out


_INT_BINARY_OPS = {"add", "sub", "mul", "floordiv", "remainder", "pow", "maximum", "minimum",
                   "bitwise_and", "bitwise_or", "bitwise_xor"}
_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


def _beyond_int32(value) -> bool:
    """A Python (or NumPy) integer that an i32 cannot hold."""
    return (isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
            and not _INT32_MIN <= value <= _INT32_MAX)


def _refuse_wide_int(op: str, value) -> None:
    if _beyond_int32(value):
        raise ValueError(f"{op}: the integer {int(value)} is beyond {intmath.INT64_BITS}; use a float "
                         f"operand or a smaller value")


def _int_binary(name: str, a, b, out_dtype, label: str = "") -> Tensor:
    """Exact integer (or bool) arithmetic on the i32 kernels; never differentiable. An int64
    result that can pass 32 bits runs on the checked kernel: beyond 32 bits is a ValueError
    (at the next host read, naming `label`, default `name`) instead of a wrapped value; int32
    wraps, as torch's."""
    label = label or name
    if name not in _INT_BINARY_OPS:
        raise ValueError(f"{name}: not defined for integer tensors (dtype {out_dtype})")
    if name == "pow" and not isinstance(b, Tensor) and b < 0:
        raise ValueError("pow: integers to negative integer powers are not allowed (use a float base)")
    if name == "sub" and out_dtype is bool_:
        raise ValueError("sub: subtracting bool tensors is not supported; use logical_xor or ~ instead")
    _refuse_wide_int(label, a)
    _refuse_wide_int(label, b)
    a, b = _to_tensor(a), _to_tensor(b)
    check = label if out_dtype is int64 and name in intmath.CHECKED_BINARY else ""
    buf, shape = gpu().broadcast_binary_int(name, _int_operand(a), a.shape, _int_operand(b), b.shape, check=check)
    out = Tensor(buf, shape, int64 if out_dtype is bool_ else out_dtype)
    return _compare("ne", out, 0) if out_dtype is bool_ else out


def _is_scalar(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, np.bool_)


def _binary(name: str, a, b) -> Tensor:
    if name == "pow":
        a, b = _autocast(name, a, b)
    out_dtype = _result_dtype(a, b)
    if (name == "div" or (name == "pow" and isinstance(b, float))) and not out_dtype.is_floating_point:
        out_dtype = dtypes.default_float()
    if not out_dtype.is_floating_point:
        return _int_binary(name, a, b, out_dtype)
    if name in ("floordiv", "remainder"):  # floats: floor(a / b) and a - b * floor(a / b), as torch
        quotient = _unary("floor", _binary("div", a, b))
        return quotient if name == "floordiv" else _binary("sub", a, _binary("mul", b, quotient))
    if name in _SCALAR_OPS and isinstance(a, Tensor) and _is_scalar(b):
        return _scalar_binary(name, a, float(b), reverse=False, wide=out_dtype is float64)
    if name in _SCALAR_OPS and isinstance(b, Tensor) and _is_scalar(a):
        return _scalar_binary(name, b, float(a), reverse=True, wide=out_dtype is float64)
    wide = out_dtype is float64
    a, b = (float(v) if _beyond_int32(v) else v for v in (a, b))  # a float op: no int64 operand
    a = _to_tensor(a, b if wide else None)
    b = _to_tensor(b, a if wide else None)
    dev = gpu()
    a_buf, b_buf = _float_operands(a, b, wide=wide)  # the backward reads these, never int bits
    buf, shape = dev.broadcast_binary(name, a_buf, a.shape, b_buf, b.shape)
    out = Tensor(buf, shape)

    needs = (a.requires_grad, b.requires_grad)
    backward = rule(name, dev, a_buf, b_buf, buf, shapes=(a.shape, b.shape, shape), needs=needs)
    return _record(name, out, (a, b), backward, native=buf.dtype == "f16")


# Tensor-with-Python-scalar arithmetic as one unary launch: name -> (forward op, reversed op).
_SCALAR_OPS = {"add": ("add_scalar", "add_scalar"), "sub": ("add_scalar", "rsub_scalar"),
               "mul": ("scale", "scale"), "div": ("div_scalar", "rdiv_scalar"), "pow": ("pow_scalar", None)}


def _scalar_binary(name: str, x: Tensor, s: float, reverse: bool, wide: bool = False) -> Tensor:
    """x op s (or s op x when reverse) for a Python number s, with its backward."""
    op = _SCALAR_OPS[name][1 if reverse else 0]
    if op is None:  # s ** x: through the broadcasting kernel
        return _binary(name, full((), s, dtype=float64 if wide else None), x)
    dev = gpu()
    xb, = _float_operands(x, wide=wide)
    alpha = -s if (name, reverse) == ("sub", False) else s
    out = Tensor(dev.unary(op, xb, alpha), x.shape)

    backward = rule(op, dev, xb, out._buf, alpha)
    return _record(name, out, (x,), backward, native=xb.dtype == "f16")


def _compare(name: str, a, b) -> Tensor:
    """An elementwise comparison: a bool tensor (never differentiable). Integers compare
    exactly on the i32 kernel, anything with a float on the float kernel."""
    result = _result_dtype(a, b)
    exact_int = not result.is_floating_point
    wide = result is float64
    if _beyond_int32(a) or _beyond_int32(b):
        if exact_int:  # every int64 value we hold is on one side of it: all True or all False
            return _compare_wide_int(name, a, b)
        a, b = (float(v) if _beyond_int32(v) else v for v in (a, b))
    a = _to_tensor(a, b if wide else None)
    b = _to_tensor(b, a if wide else None)
    if exact_int:
        buf, shape = gpu().broadcast_binary_int(name, _int_operand(a), a.shape, _int_operand(b), b.shape)
    else:
        a_buf, b_buf = _float_operands(a, b, wide=wide)  # float16 with float16: compared as stored
        buf, shape = gpu().broadcast_binary(name, a_buf, a.shape, b_buf, b.shape)
    return Tensor(buf, shape, bool_)


_COMPARE_FN = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le, "gt": operator.gt,
               "ge": operator.ge}


def _compare_wide_int(name: str, a, b) -> Tensor:
    """An integer tensor compared with a Python integer beyond 32 bits: exact, as torch's int64
    (0 stands for every element: all lie on the same side of the number)."""
    tensor_side = a if isinstance(a, Tensor) else b
    truth = _COMPARE_FN[name](0 if a is tensor_side else a, 0 if b is tensor_side else b)
    return full(tensor_side.shape, truth, dtype=bool_)


def _int_unary(name: str, x: Tensor, alpha, beta) -> Tensor:
    """The unary ops that keep an integer dtype in torch, on the exact integer kernels."""
    if x.dtype is bool_:
        x = _cast(x, int64)
    if name == "neg":
        return _int_binary("sub", 0, x, x.dtype, "neg")
    if name == "abs":
        return _int_binary("maximum", x, _int_binary("sub", 0, x, x.dtype, "abs"), x.dtype)
    if name == "square":
        return _int_binary("mul", x, x, x.dtype, "square")
    if name == "relu":
        return _int_binary("maximum", x, 0, x.dtype)
    # clamp with integer bounds (None = no bound). A bound beyond 32 bits on the far side of
    # every value we hold changes nothing; on the near side every result would be that bound.
    low = None if alpha is None or int(alpha) < _INT32_MIN else int(alpha)
    high = None if beta is None or int(beta) > _INT32_MAX else int(beta)
    out = x
    if low is not None:
        out = _int_binary("maximum", out, low, x.dtype, "clamp")
    if high is not None:
        out = _int_binary("minimum", out, high, x.dtype, "clamp")
    return out.clone() if out is x else out


_INT_KEEPING_UNARY = {"neg", "abs", "square", "relu", "clamp"}


def _unary(name: str, x: Tensor, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    x, = _autocast(name, x)
    if not x.dtype.is_floating_point and name in _INT_KEEPING_UNARY:
        return _int_unary(name, x, alpha, beta)
    dev = gpu()
    xb, = _float_operands(x)
    out = Tensor(dev.unary(name, xb, alpha, beta), x.shape)
    return _record(name, out, (x,), rule(name, dev, xb, out._buf, alpha, beta), native=xb.dtype == "f16")


def unary_op(name: str, x: Tensor, alpha: float = 0.0, beta: float = 0.0) -> Tensor:
    """Apply a recorded unary op by name (relu, sigmoid, tanh, silu, gelu, exp, ...)."""
    return _unary(name, x, alpha, beta)


def _as_float(t: Tensor) -> Tensor:
    return t if t.dtype.is_floating_point else t.float()
