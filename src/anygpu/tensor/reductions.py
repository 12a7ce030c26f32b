"""Reductions: sum, max/min, argmax/argmin, softmax, log_softmax, logsumexp, prod, cumsum,
cumprod, cummax/cummin."""

from __future__ import annotations

import functools
import math

import numpy as np

from ..autograd.rules import backward as rule
from ..dtypes import float16, float32, int64
from ..ops import gpu
from ..ops.nd import numel

from .core import MaxResult, Tensor, _dim, bool_
from .grad_mode import no_grad
from .recording import _record, sum_dims
from .creation import arange, full, linked_empty, ones, tensor, zeros
from .elementwise import _autocast, _cast, _compare, _float_operand, _int_operand
from .views import expand
from .indexing import gather, where
from .shape import _moved_back, _moved_last, cat, movedim
from .linear import matmul


def _dims(op: str, dim, ndim: int) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(ndim))
    if isinstance(dim, int):
        dim = (dim,)
    dims = tuple(sorted({_dim(op, d, ndim) for d in dim}))
    return dims


_INT32_MAX = 2**31 - 1


def _check_int_sums(op: str, x: Tensor, host_sums) -> None:
    """ValueError when a sum of x's integers would pass 32 bits: anygpu stores int64 in i32,
    where the kernels would wrap, and torch's int64 would not. The float32 sum of |x| bounds
    every sum (one read-back; bool tensors count below 2**31 and skip it); only past that
    bound are the exact sums (`host_sums` of the values in int64) made on the host. Partial
    sums that wrap do no harm: i32 addition is exact modulo 2**32."""
    if x.dtype.is_floating_point or x.dtype is bool_ or x.numel() < 2:
        return
    if float(_reduce_sum(_cast(x, float32).abs(), None, False).item()) < 0.99 * _INT32_MAX:
        return
    exact = np.asarray(host_sums(x.numpy().astype(np.int64)))
    if exact.size and (exact.max() > _INT32_MAX or exact.min() < -_INT32_MAX - 1):
        worst = int(exact.max()) if exact.max() > _INT32_MAX else int(exact.min())
        raise ValueError(f"{op}: an integer sum reaches {worst}, beyond the 32 bits anygpu keeps int64 in "
                         f"([-2**31, 2**31 - 1]); use x.float().{op}(...) where float32's 24-bit precision "
                         f"will do")


def _reduce_sum_int(x: Tensor, dims, keepdim: bool) -> Tensor:
    """Exact sum of an integer or bool tensor over dims: int64, as torch (a sum beyond 32
    bits raises: _check_int_sums)."""
    _check_int_sums("sum", x, lambda values: values.sum(axis=tuple(dims)))
    dev = gpu()
    buf, shape = _int_operand(x), list(x.shape)
    for d in sorted(dims, reverse=True):
        buf = dev.reduce_axis_int(buf, numel(shape[:d]), shape[d], numel(shape[d + 1:]), "sum")
        shape[d] = 1
    if buf is x._buf:
        buf = dev.copy(buf)
    out_shape = tuple(shape) if keepdim else tuple(s for i, s in enumerate(x.shape) if i not in dims)
    return Tensor(buf, out_shape, int64)


def _reduce_sum(x: Tensor, dim, keepdim: bool) -> Tensor:
    x, = _autocast("sum", x)
    dev = gpu()
    dims = _dims("sum", dim, x.ndim)
    if not x.dtype.is_floating_point:
        return _reduce_sum_int(x, dims, keepdim)
    kept = tuple(1 if d in dims else size for d, size in enumerate(x.shape))
    buf = sum_dims(_float_operand(x), x.shape, dims) if x.numel() else dev.alloc(numel(kept))
    out_shape = kept if keepdim else tuple(s for i, s in enumerate(x.shape) if i not in dims)
    if not dims and x.ndim == 0:
        out_shape = ()
    out = Tensor(buf if buf is not x._buf else dev.copy(buf), out_shape)

    return _record("sum", out, (x,), rule("sum", dev, x.shape, kept))


def _reduce_extreme(op: str, x: Tensor, dim, keepdim: bool):
    """max/min: over everything (a 0-d tensor) or over one dim -> (values, indices)."""
    dev = gpu()
    if not x.dtype.is_floating_point:
        return _reduce_extreme_int(op, x, dim, keepdim)
    if dim is None:  # a 0-d result whose gradient is shared evenly among tied extremes, as in torch
        if x.numel() == 0:
            raise ValueError(f"{op}: cannot reduce an empty tensor of shape {x.shape}")
        xb = _float_operand(x)
        value = Tensor(dev.reduce_axis(xb, 1, x.numel(), 1, op), ())

        return _record(op, value, (x,), rule(op + "_all", dev, xb, value._buf, x.shape))
    d = _dim(op, dim, x.ndim)
    outer, mid, inner = numel(x.shape[:d]), x.shape[d], numel(x.shape[d + 1:])
    if mid == 0:
        raise ValueError(f"{op}: cannot reduce over an empty dimension {d} of shape {x.shape}")
    xb = _float_operand(x)
    idx = dev.reduce_axis(xb, outer, mid, inner, "arg" + op)
    vals = dev.reduce_axis(xb, outer, mid, inner, op)
    kept = x.shape[:d] + (1,) + x.shape[d + 1:]
    out_shape = kept if keepdim else x.shape[:d] + x.shape[d + 1:]
    values = Tensor(vals, out_shape)
    indices = Tensor(idx, out_shape, int64)

    _record(op, values, (x,), rule(op + "_dim", dev, idx, outer, mid, inner))
    return MaxResult(values, indices)


def _reduce_extreme_int(op: str, x: Tensor, dim, keepdim: bool):
    """max/min of an integer or bool tensor, exact: a value, or (values, indices) over dim."""
    dev = gpu()
    xb = _int_operand(x)
    if dim is None:
        if x.numel() == 0:
            raise ValueError(f"{op}: cannot reduce an empty tensor of shape {x.shape}")
        value = Tensor(dev.reduce_axis_int(xb, 1, x.numel(), 1, op), (), int64)
        return _cast(value, x.dtype)
    d = _dim(op, dim, x.ndim)
    outer, mid, inner = numel(x.shape[:d]), x.shape[d] if x.ndim else 1, numel(x.shape[d + 1:])
    out_shape = x.shape[:d] + ((1,) if keepdim else ()) + x.shape[d + 1:]
    values = _cast(Tensor(dev.reduce_axis_int(xb, outer, mid, inner, op), out_shape, int64), x.dtype)
    return MaxResult(values, Tensor(dev.reduce_axis_int(xb, outer, mid, inner, "arg" + op), out_shape, int64))


def _arg_reduce(op: str, x: Tensor, dim, keepdim: bool) -> Tensor:
    dev = gpu()
    exact_int = not x.dtype.is_floating_point
    reduce = dev.reduce_axis_int if exact_int else dev.reduce_axis
    xb = _int_operand(x) if exact_int else _float_operand(x)
    if dim is None:
        out = reduce(xb, 1, x.numel(), 1, op)
        return Tensor(out, (1,) * x.ndim if keepdim else (), int64)
    d = _dim(op, dim, x.ndim)
    out = reduce(xb, numel(x.shape[:d]), x.shape[d] if x.ndim else 1, numel(x.shape[d + 1:]), op)
    shape = x.shape[:d] + ((1,) if keepdim else ()) + x.shape[d + 1:]
    return Tensor(out, shape, int64)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along dim: the fused row kernel over the last
    dim (another dim is moved last and back)."""
    x, = _autocast("softmax", x)
    d = _dim("softmax", dim, x.ndim)
    if x.numel() == 0:
        return x.float().clone()
    if x.ndim == 0:
        return softmax(x.reshape(1), 0).reshape(())
    if d != x.ndim - 1:
        return softmax(x.transpose(d, -1), -1).transpose(d, -1)
    dev = gpu()
    cols = x.shape[-1]
    rows = x.numel() // cols
    xb = x._buf  # (read once: a strided view gathers on each read)
    xb = xb if xb.dtype in ("f16", "f32", "f64") else dev.cast(xb, "f32")  # f16 rows: the f16 row kernels
    out = Tensor(dev.softmax(xb, rows, cols), x.shape)
    return _record("softmax", out, (x,), rule("softmax", dev, out._buf, rows, cols))


def _max_detached(x: Tensor, d: int) -> Tensor:
    """x's max over dim d, kept as size 1, outside the graph (a shift that cancels out)."""
    out = gpu().reduce_axis(_float_operand(x), numel(x.shape[:d]), x.shape[d], numel(x.shape[d + 1:]), "max")
    return Tensor(out if x._buf.dtype != "f16" else gpu().cast(out, "f16"), x.shape[:d] + (1,) + x.shape[d + 1:])


def _in_float32(fn):
    """A composite op that runs a float16 input in float32 and rounds its result to float16
    once, as torch's half kernels do (f32 math inside), rather than after every step.
    Under autocast the op's policy (amp.FLOAT32) applies first: the result stays float32."""
    @functools.wraps(fn)
    def run(x, *args, **kwargs):
        x, = _autocast(fn.__name__, x)
        if x.dtype is not float16:
            return fn(x, *args, **kwargs)
        out = fn(_cast(x, float32), *args, **kwargs)
        return _cast(out, float16) if out.dtype is float32 else out
    return run


@_in_float32
def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    """x - max - log(sum(exp(x - max))) along dim (numerically stable)."""
    d = _dim("log_softmax", dim, x.ndim)
    if x.ndim == 0:
        return log_softmax(x.reshape(1), 0).reshape(())
    if x.numel() == 0:  # empty rows (or no rows): an empty result, as torch
        return x.float().clone()
    shifted = x - _max_detached(x, d)
    return shifted - shifted.exp().sum(d, keepdim=True).log()


@_in_float32
def logsumexp(x: Tensor, dim, keepdim: bool = False) -> Tensor:
    """log(sum(exp(x))) over dim, computed around the max (numerically stable)."""
    d = _dim("logsumexp", dim, x.ndim)
    if x.shape[d] == 0:  # the log of an empty sum: -inf, as torch
        out = linked_empty(full(x.shape[:d] + (1,) + x.shape[d + 1:], -math.inf), x)
        return out if keepdim else out.squeeze(d)
    peak = _max_detached(x, d)
    # An infinite max shifts by 0 instead: inf - inf would be NaN where torch gives +-inf.
    peak = where(peak.abs() == math.inf, 0.0, peak)
    with no_grad():
        out = (x - peak).exp().sum(d, keepdim=True).log() + peak
    # torch's gradient, grad * exp(x - out): 0 for a finite x beside an infinite one, where
    # the chain above (exp(x) / sum with an infinite sum) would make 0 * inf = NaN.
    out = _record("logsumexp", Tensor(out._buf, out.shape), (x,),
                  rule("logsumexp", gpu(), _float_operand(x), out._buf, x.shape, out.shape))
    return out if keepdim else out.squeeze(d)


_CUMSUM_BLOCK = 256


def _cumulative_extreme(op: str, x: Tensor, dim: int, compare: str):
    """cummax / cummin: the running extreme's positions found without a graph by log2(n)
    doubling steps (a later segment's (value, position) wins where its value compares `ge`
    (`le`) or is NaN: associative, so the same as the left-to-right scan), then the values
    gathered from x (their gradient lands on those positions, as torch's)."""
    if x.ndim == 0:
        _dim(op, dim, 1)
        return MaxResult(x * 1, zeros((), dtype=int64))
    d = _dim(op, dim, x.ndim)
    n = x.shape[d]
    with no_grad():
        value = movedim(x.detach(), d, -1)
        index = expand(arange(n, dtype=int64), value.shape) if n else zeros(value.shape, dtype=int64)
        step = 1
        while step < n:
            left_v, right_v = value[..., :n - step], value[..., step:]
            left_i, right_i = index[..., :n - step], index[..., step:]
            later = _compare(compare, right_v, left_v)
            if x.dtype.is_floating_point:
                later = later | right_v.isnan()
            value = cat([value[..., :step], where(later, right_v, left_v)], -1)
            index = cat([index[..., :step], where(later, right_i, left_i)], -1)
            step *= 2
        index = movedim(index, -1, d)
    return MaxResult(gather(x, d, index), index)


def _scan_int(op: str, x: Tensor, dim: int) -> Tensor:
    """cumsum / cumprod of an integer or bool tensor along dim: int64 as torch, on the exact
    scan kernel (a running value beyond 32 bits raises at the next read: ops/intmath.py)."""
    d = _dim(op, dim, max(x.ndim, 1))
    shape = x.shape or (1,)
    buf = gpu().scan_int(_int_operand(x), numel(shape[:d]), shape[d], numel(shape[d + 1:]), op)
    return Tensor(buf, x.shape, int64)


def cumsum(x: Tensor, dim: int, dtype=None) -> Tensor:
    """Running sums along dim: a matmul with a triangle of ones per block of 256 and a
    recursive running sum of the block totals; integers (bool counts too) to int64 on the
    exact scan kernel (_scan_int)."""
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_floating_point:
        return _scan_int("cumsum", x, dim)
    if x.ndim == 0:
        return x.clone()
    moved, d = _moved_last(x, dim, "cumsum")
    n = moved.shape[-1]
    if n <= _CUMSUM_BLOCK:
        triangle = tensor(np.triu(np.ones((n, n), np.int64)), dtype=moved.dtype)
        return _moved_back(matmul(moved, triangle), d, x.ndim)
    blocks = -(-n // _CUMSUM_BLOCK)
    pad = blocks * _CUMSUM_BLOCK - n
    padded = cat([moved, zeros(moved.shape[:-1] + (pad,), dtype=moved.dtype)], -1) if pad else moved
    grouped = padded.reshape(moved.shape[:-1] + (blocks, _CUMSUM_BLOCK))
    inner = cumsum(grouped, -1)
    totals = inner[..., -1]
    offsets = cumsum(totals, -1) - totals
    out = (inner + offsets.unsqueeze(-1)).reshape(moved.shape[:-1] + (blocks * _CUMSUM_BLOCK,))
    return _moved_back(out[..., :n] if pad else out, d, x.ndim)


def prod(x: Tensor, dim=None, keepdim: bool = False, dtype=None) -> Tensor:
    """The product over dim (everything by default) by pairwise halving: log2(n) multiplies,
    exact for zeros and negative values, differentiable through each multiply."""
    if dtype is not None:
        x = x.to(dtype)
    if dim is None:
        out = prod(x.reshape(-1), 0)
        return out.reshape((1,) * x.ndim) if keepdim else out
    if not x.dtype.is_floating_point:  # int64 as torch, on the exact scan kernel
        d = _dim("prod", dim, max(x.ndim, 1))
        shape = x.shape or (1,)
        buf = gpu().scan_int(_int_operand(x), numel(shape[:d]), shape[d], numel(shape[d + 1:]), "prod")
        kept = shape[:d] + (1,) + shape[d + 1:]
        return Tensor(buf, kept if keepdim and x.ndim else x.shape[:d] + x.shape[d + 1:], int64)
    moved, d = _moved_last(x, dim, "prod")
    out = moved
    while out.shape[-1] > 1:
        size = out.shape[-1]
        half = size // 2
        paired = out[..., :half] * out[..., half:2 * half]
        out = cat([paired, out[..., 2 * half:]], -1) if size % 2 else paired
    if out.shape[-1] == 0:
        out = ones(out.shape[:-1] + (1,), dtype=out.dtype)
    out = _moved_back(out, d, x.ndim)
    return out if keepdim else out.squeeze(d)


def cumprod(x: Tensor, dim: int, dtype=None) -> Tensor:
    """Running products along dim by log2(n) doubling steps (Hillis-Steele), differentiable."""
    if dtype is not None:
        x = x.to(dtype)
    if not x.dtype.is_floating_point:
        return _scan_int("cumprod", x, dim)
    moved, d = _moved_last(x, dim, "cumprod")
    n = moved.shape[-1] if moved.ndim else 1
    out, shift = moved, 1
    while shift < n:
        lead = ones(out.shape[:-1] + (shift,), dtype=out.dtype)
        out = out * cat([lead, out[..., :n - shift]], -1)
        shift *= 2
    return _moved_back(out, d, x.ndim) if x.ndim else out
