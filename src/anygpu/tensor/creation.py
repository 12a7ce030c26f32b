"""Tensor factories: tensor, from_numpy, zeros, ones, full, arange, rand, randn, randint,
randperm, multinomial, and the rng state as a tensor."""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes, placement
from ..dtypes import float16, float32, int32, int64
from ..ops import gpu
from ..ops.nd import numel

from ..ops.determinism import fills_uninitialized_memory
from .core import Tensor, _BUF_DTYPE, _NP_DTYPE, _as_shape, _check_half, _is_int, _normalize_dtype, bool_
from .grad_mode import is_grad_enabled
from .outputs import factory
from .rng import _STATE_WORDS, _generator_rng, _rng


def get_rng_state() -> "Tensor":
    """The random stream's state as an int32 Tensor (torch gives a ByteTensor; both are opaque:
    save it, hand it back to set_rng_state)."""
    state = _rng[0].bit_generator.state
    if state.get("bit_generator") != "PCG64":
        raise RuntimeError(f"get_rng_state: the random stream is a {state.get('bit_generator')}, expected PCG64")
    words = []
    for value, count in ((state["state"]["state"], 4), (state["state"]["inc"], 4),
                         (state["has_uint32"], 1), (state["uinteger"], 1)):
        words += [(int(value) >> (32 * k)) & 0xFFFFFFFF for k in range(count)]
    return tensor(np.array(words, np.uint32).view(np.int32), dtype=int32)


def set_rng_state(new_state) -> None:
    """Put back a state from get_rng_state."""
    if not isinstance(new_state, Tensor) or new_state.numel() != _STATE_WORDS or new_state.dtype is not int32:
        raise ValueError(f"set_rng_state: expected the int32 Tensor of {_STATE_WORDS} words that get_rng_state "
                         f"gives, got {new_state!r:.80}")
    words = [int(w) for w in new_state.numpy().astype(np.int32).view(np.uint32)]

    def join(part):
        return sum(w << (32 * k) for k, w in enumerate(part))
    generator = np.random.PCG64()
    generator.state = {"bit_generator": "PCG64", "state": {"state": join(words[0:4]), "inc": join(words[4:8])},
                       "has_uint32": words[8], "uinteger": words[9]}
    _rng[0] = np.random.Generator(generator)


def _infer_dtype(arr: np.ndarray, data=None) -> dtypes.dtype:
    """torch's dtype for data: bool, int64 (int32 for int32/smaller numpy arrays), float64
    for float64 NumPy data, float16 for float16 data, and the default dtype (float32 unless
    set_default_dtype said float64) for Python floats and float32 data."""
    if arr.dtype.kind == "b":
        return bool_
    if arr.dtype.kind in "iu":
        return int64 if arr.dtype.itemsize >= 8 or arr.dtype == np.uint32 else int32
    if arr.dtype == np.float16:
        _check_half("tensor")
        return float16
    if arr.dtype == np.float64 and isinstance(data, (np.ndarray, np.floating)):
        return dtypes.float64
    return float32 if arr.dtype == np.float32 and isinstance(data, (np.ndarray, np.floating)) else dtypes.default_float()


def tensor(data, dtype=None, device=None, requires_grad: bool = False, pin_memory: bool = False) -> Tensor:
    """A new tensor holding a copy of `data` (list, number, numpy array or Tensor)."""
    placement.check_device("tensor", device)
    if isinstance(data, Tensor):
        data = data.numpy()
    elif isinstance(data, (list, tuple)) and any(isinstance(v, Tensor) for v in data):
        data = [v.numpy() if isinstance(v, Tensor) else v for v in data]
    arr = np.asarray(data)
    if arr.dtype.kind not in "iubf":
        raise ValueError(f"tensor: cannot make a tensor from data of dtype {arr.dtype}")
    dtype = _infer_dtype(arr, data) if dtype is None else _normalize_dtype(dtype)
    if _is_int(dtype):
        _check_int_range("tensor", arr)
    if dtype is bool_:
        arr = arr != 0
    with np.errstate(over="ignore"):  # float16: beyond 65504 is inf, as torch
        host = np.array(arr, dtype=_NP_DTYPE[dtype], order="C")  # a copy; ascontiguousarray would make 0-d 1-d
    t = Tensor(gpu().upload(host.reshape(-1), _BUF_DTYPE[dtype]), host.shape, dtype)
    t._host = host
    if requires_grad:
        t.requires_grad_(True)
    return t


def from_numpy(arr) -> Tensor:
    return tensor(arr)


@factory(variadic=False)
def full(shape, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """A tensor of `shape` filled with fill_value; the dtype follows the value when not given
    (bool, int64 or float32), as in torch."""
    placement.check_device("full", device)
    shape = _as_shape("full", shape if isinstance(shape, (tuple, list)) else (shape,))
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if dtype is None:
        dtype = bool_ if isinstance(fill_value, (bool, np.bool_)) else \
            int64 if isinstance(fill_value, (int, np.integer)) else dtypes.default_float()
    dtype = _normalize_dtype(dtype, "full")
    dev = gpu()
    if dtype is dtypes.float64:
        _check_fits("full", numel(shape), 8)
        buf = dev.upload(np.full(numel(shape), float(fill_value)), "f64")
    elif dtype.is_floating_point or dtype is bool_:
        value = float(bool(fill_value)) if dtype is bool_ else float(fill_value)
        buf = dev.unary("fill", dev.empty(numel(shape)), value)
        buf = dev.cast(buf, "f16") if dtype is float16 else buf  # rounded as torch: 70000 -> inf
    else:
        _check_fits("full", numel(shape))
        _check_int_value("full", fill_value)
        buf = dev.upload(np.full(numel(shape), int(fill_value), np.int32))
    return Tensor(buf, shape, dtype, requires_grad)


@factory()
def zeros(*shape, dtype=None, requires_grad: bool = False, device=None, out=None) -> Tensor:
    placement.check_device("zeros", device)
    shape = _as_shape("zeros", shape)
    dtype = _normalize_dtype(dtype, "zeros")
    return Tensor(gpu().alloc(numel(shape), _BUF_DTYPE[dtype]), shape, dtype, requires_grad)


@factory()
def ones(*shape, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("ones", device)
    dtype = _normalize_dtype(dtype, "ones")
    return full(_as_shape("ones", shape), 1.0 if dtype.is_floating_point else 1,
                dtype=dtype, requires_grad=requires_grad)


def uninitialized(shape, dtype=None, requires_grad: bool = False) -> Tensor:
    """What `empty` and its kin return: zeros (anygpu never hands out uninitialised memory);
    under use_deterministic_algorithms(True) with fill_uninitialized_memory, torch's fill
    instead: NaN, the dtype's largest value, or True (tensor/determinism.py)."""
    if not fills_uninitialized_memory():
        return zeros(shape, dtype=dtype, requires_grad=requires_grad)
    dtype = _normalize_dtype(dtype, "empty")
    value = True if dtype is bool_ else math.nan if dtype.is_floating_point else 2**31 - 1
    return full(_as_shape("empty", shape), value, dtype=dtype, requires_grad=requires_grad)


@factory()
def empty(*shape, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    """Zeros (anygpu never hands out uninitialised memory; see `uninitialized`)."""
    placement.check_device("empty", device)
    return uninitialized(_as_shape("empty", shape), dtype, requires_grad)


def zeros_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("zeros_like", device)
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("ones_like", device)
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("empty_like", device)
    return uninitialized(t.shape, dtype or t.dtype, requires_grad)


def full_like(t: Tensor, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("full_like", device)
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


@factory(variadic=False, size_keyword=False)
def arange(start, end=None, step=1, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """torch.arange: int64 when start, end and step are all integers, else float32."""
    placement.check_device("arange", device)
    if end is None:
        start, end = 0, start
    start, end, step = (v.item() if isinstance(v, Tensor) else v for v in (start, end, step))
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    span = (end - start) / step
    if not math.isfinite(span):
        raise ValueError(f"arange: the range from {start} to {end} by {step} is not finite")
    _check_fits("arange", max(math.ceil(span), 0))
    values = np.arange(start, end, step)
    if dtype is None:
        dtype = int64 if all(isinstance(v, (int, np.integer)) for v in (start, end, step)) else dtypes.default_float()
    if _is_int(_normalize_dtype(dtype, "arange")):
        _check_int_range("arange", values)
    return tensor(values, dtype=dtype, requires_grad=requires_grad)


def linked_empty(out: Tensor, *inputs) -> Tensor:
    """`out`, the result of an op on empty operands (empty, or zeros such as a k = 0
    product), linked into the graph through each input that requires grad: their
    gradients are then zeros of their shapes, as torch's, instead of no gradient at all."""
    for x in inputs:
        if isinstance(x, Tensor) and x.requires_grad and is_grad_enabled():
            out = out + x.sum() * 0.0
    return out


_INT32_MIN, _INT32_MAX = -2**31, 2**31 - 1


def _check_int_range(op: str, values: np.ndarray) -> None:
    """ValueError for values an integer tensor cannot hold: anygpu keeps int64 in 32 bits and
    refuses what would not fit rather than wrap it (floats count truncated, as torch converts
    them; NaN and infinity have no integer value)."""
    if not values.size or values.dtype.kind not in "iuf":
        return
    if values.dtype.kind == "f":
        if not np.isfinite(values).all():
            raise ValueError(f"{op}: NaN and infinity have no integer value")
        values = np.trunc(values)
    low, high = values.min(), values.max()
    if low < _INT32_MIN or high > _INT32_MAX:
        _check_int_value(op, high if high > _INT32_MAX else low)


def _check_int_value(op: str, value) -> None:
    """_check_int_range for one Python or NumPy number."""
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(value):
            raise ValueError(f"{op}: NaN and infinity have no integer value")
        value = math.trunc(value)
    if not _INT32_MIN <= int(value) <= _INT32_MAX:
        raise ValueError(f"{op}: the integer {int(value)} is outside the int32 range [-2**31, 2**31 - 1], the 32 "
                         f"bits anygpu keeps int64 in; use a float tensor or smaller values")


def _check_fits(op: str, count: int, itemsize: int = 4) -> None:
    """LimitError when `count` elements cannot be one buffer on this adapter: checked
    before any host array is built, so a huge request costs no host memory."""
    gpu()._check_size(int(count) * itemsize, op)


def _random_float(op: str, shape, dtype, requires_grad, draw) -> Tensor:
    shape = _as_shape(op, shape)
    dtype = _normalize_dtype(dtype, op)
    if not dtype.is_floating_point:
        raise ValueError(f"{op}: dtype must be a float dtype, got {dtype}")
    _check_fits(op, numel(shape))
    return tensor(draw(shape, dtype is dtypes.float64), dtype=dtype, requires_grad=requires_grad)


@factory()
def rand(*shape, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    placement.check_device("rand", device)
    rng = _generator_rng(generator)
    return _random_float("rand", shape, dtype, requires_grad,
                         lambda s, wide: rng.random(s, dtype=np.float64 if wide else np.float32))


@factory()
def randn(*shape, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    placement.check_device("randn", device)
    rng = _generator_rng(generator)
    return _random_float("randn", shape, dtype, requires_grad,
                         lambda s, wide: rng.standard_normal(s, dtype=np.float64 if wide else np.float32))


@factory(size_keyword=False)
def randint(*args, size=None, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """torch.randint(high, size) or randint(low, high, size): integers in [low, high), int64."""
    placement.check_device("randint", device)
    args = list(args)
    if size is None and args and isinstance(args[-1], (tuple, list)):
        size = args.pop()
    if len(args) == 1:
        low, high = 0, args[0]
    elif len(args) == 2:
        low, high = args
    else:
        raise ValueError(f"randint: expected (high, size) or (low, high, size), got {len(args)} numbers")
    if size is None:
        raise ValueError("randint: size is required, e.g. torch.randint(10, (3,))")
    low, high = int(low), int(high)
    if high <= low:
        raise ValueError(f"randint: expected low < high, got low={low}, high={high}")
    if dtype is None or _is_int(_normalize_dtype(dtype, "randint")):
        _check_int_value("randint", low)
        _check_int_value("randint", high - 1)
    size = _as_shape("randint", tuple(size))
    _check_fits("randint", numel(size))
    values = _generator_rng(generator).integers(low, high, size=size)
    return tensor(values, dtype=int64 if dtype is None else dtype, requires_grad=requires_grad)


def multinomial(probs: Tensor, num_samples: int, replacement: bool = False, generator=None) -> Tensor:
    """Samples of category indices (int64) from each row of non-negative weights. Drawn on
    the host from anygpu's generator: the same seed gives the same draws, but not torch's."""
    weights = probs.numpy().astype(np.float64)
    rows = weights.reshape(-1, weights.shape[-1]) if weights.ndim else None
    if rows is None or weights.ndim > 2:
        raise ValueError(f"multinomial: expects a 1-D or 2-D tensor of weights, got shape {probs.shape}")
    if (rows < 0).any() or not np.isfinite(rows).all():
        raise ValueError("multinomial: weights must be finite and non-negative")
    if not replacement and num_samples > rows.shape[1]:
        raise ValueError(f"multinomial: cannot draw {num_samples} samples without replacement from "
                         f"{rows.shape[1]} categories")
    rng = _generator_rng(generator)
    draws = []
    for row in rows:
        total = row.sum()
        if total <= 0:
            raise ValueError("multinomial: a row of weights sums to zero")
        draws.append(rng.choice(row.size, size=num_samples, replace=replacement, p=row / total))
    out = np.array(draws, dtype=np.int64)
    return tensor(out if weights.ndim == 2 else out[0])


def randperm(n: int, generator=None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    placement.check_device("randperm", device)
    _check_fits("randperm", int(n))
    torch_order = getattr(generator, "_torch_randperm", None)  # an anygpu.Generator: torch's order
    if torch_order is not None:
        order = np.asarray(torch_order(int(n)), dtype=np.int64)
    else:
        order = _generator_rng(generator).permutation(int(n))
    return tensor(order, dtype=int64 if dtype is None else dtype)
