"""torch's module-level functions (`torch.exp(x)`, `torch.topk(x, 3)`, `torch.eye(4)`, ...).

Most mirror a Tensor method of the same name and signature, so `torch.f(x, ...)` and
`x.f(...)` are one op; the rest are factories and predicates torch keeps at module level.
"""

from __future__ import annotations

import builtins
import functools

import numpy as np

from . import dtypes, placement
from .dtypes import finfo, iinfo
from .tensor.outputs import factory, with_out
from .tensor.compat_common import method_function
from .tensor.core import _as_shape
from .tensor.creation import uninitialized
from .tensor import (
    Tensor, bucketize, cartesian_prod, cdist, meshgrid, searchsorted, _generator_rng, _to_tensor, arange, argsort, cat, cumsum, diag, einsum, flip,
    full, gather, index_select, log_softmax, logsumexp, matmul, multinomial, nonzero, randperm,
    reshape, roll, softmax, sort, stack, tensor, topk, where, zeros,
)

__all__ = [
    "fmax", "fmin", "heaviside", "diag_embed",
    "abs", "absolute", "add", "all", "allclose", "amax", "amin", "any", "arange", "argmax", "argmin", "argsort",
    "as_tensor", "bmm", "cat", "ceil", "chunk", "clamp", "clip", "clone", "concat", "concatenate", "cos",
    "cumsum", "detach", "diag", "div", "divide", "dot", "einsum", "empty_like", "eq", "equal", "exp", "expm1",
    "eye", "flatten", "flip", "floor", "floor_divide", "gather", "ge", "get_default_dtype", "gt", "index_select",
    "is_floating_point", "is_tensor", "isclose", "isfinite", "isinf", "isnan", "le", "linspace", "log",
    "log10", "log1p", "log2", "log_softmax", "logical_and", "logical_not", "logical_or", "logical_xor",
    "logsumexp", "lt", "masked_fill", "matmul", "max", "maximum", "mean", "min", "minimum", "mm", "mul",
    "multinomial", "multiply", "narrow", "ne", "neg", "negative", "nonzero", "norm", "numel", "outer",
    "permute", "pow", "rand_like", "randint_like", "randn_like", "randperm", "reciprocal", "relu",
    "remainder", "reshape", "roll", "round", "rsqrt", "set_default_dtype", "set_printoptions", "sigmoid",
    "sign", "sin", "softmax", "sort", "split", "sqrt", "square", "squeeze", "stack", "std", "sub",
    "subtract", "sum", "t", "tanh", "topk", "transpose", "tril", "triu", "true_divide", "trunc", "unbind",
    "unsqueeze", "var", "where", "empty", "ones_like", "full_like", "zeros_like",
    "scatter", "scatter_add", "masked_select", "prod", "cumprod", "repeat_interleave", "tile", "broadcast_to",
    "broadcast_tensors", "movedim", "moveaxis", "swapaxes", "select", "unflatten", "lerp", "addmm", "baddbmm",
    "count_nonzero", "tan", "sinh", "cosh", "logit", "frac", "diff", "median", "unique", "bincount", "meshgrid",
    "hstack", "vstack", "finfo", "iinfo", "Size", "bernoulli", "logspace", "atan", "arctan", "asin", "acos",
    "erf", "atan2", "arctan2", "FloatTensor", "LongTensor", "IntTensor", "BoolTensor", "DoubleTensor", "take_along_dim",
    "diagonal", "trace", "index_add", "aminmax", "inner", "cross", "hypot", "rot90", "kthvalue", "quantile",
    "bucketize", "searchsorted", "cdist", "cartesian_prod", "dist", "std_mean", "var_mean",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "index_fill", "index_copy", "masked_scatter",
    "cummax", "cummin", "histc", "erfinv", "mode", "lgamma", "digamma", "as_strided",
]


# The functions torch gives no out= (views, predicates, ...); every other one takes out=.
_NO_OUT = {"flatten", "squeeze", "unsqueeze", "transpose", "permute", "t", "narrow", "unbind", "chunk", "split",
           "clone", "detach", "numel", "equal", "is_floating_point", "broadcast_to", "movedim", "moveaxis",
           "swapaxes", "select", "unflatten", "diagonal", "as_strided", "count_nonzero", "unique", "isnan",
           "isinf", "isfinite", "relu", "masked_fill", "scatter", "scatter_add", "index_fill", "index_copy",
           "masked_scatter", "rot90", "tile", "repeat_interleave", "dot", "inner", "diff", "quantile",
           "bincount", "histc", "trace"}


def _method(name: str):
    """torch.<name>(input, *args, **kwargs) as input.<name>(*args, **kwargs), with out= where
    torch has it (tensor/outputs.py)."""
    return method_function(name, out=name not in _NO_OUT)


for _name in ("abs", "exp", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "sin", "cos", "tanh",
              "sigmoid", "relu", "neg", "square", "reciprocal", "floor", "ceil", "round", "trunc", "sign",
              "sum", "mean", "var", "std", "amax", "amin", "argmax", "argmin", "all", "any", "norm",
              "flatten", "squeeze", "unsqueeze", "transpose", "permute", "t", "narrow", "unbind", "chunk",
              "split", "tril", "triu", "clamp", "clip", "masked_fill", "pow", "add", "sub", "mul", "div",
              "remainder", "floor_divide", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
              "isnan", "isinf", "isfinite", "logical_not", "logical_and", "logical_or", "logical_xor",
              "mm", "bmm", "dot", "outer", "clone", "detach", "numel", "equal", "is_floating_point",
              "scatter", "scatter_add", "masked_select", "prod", "cumprod", "repeat_interleave", "tile",
              "broadcast_to", "movedim", "moveaxis", "swapaxes", "select", "unflatten", "lerp", "addmm", "baddbmm",
              "count_nonzero", "tan", "sinh", "cosh", "logit", "frac", "diff", "median", "unique", "bincount",
              "true_divide", "atan", "arctan", "asin", "acos", "erf", "atan2", "arctan2", "take_along_dim",
              "diagonal", "trace", "index_add", "aminmax", "inner", "cross", "hypot", "rot90", "kthvalue", "quantile",
              "index_fill", "index_copy", "masked_scatter", "cummax", "cummin", "histc", "erfinv", "mode", "lgamma", "digamma", "as_strided"):
    globals()[_name] = _method(_name)

absolute = abs  # noqa: F821 — defined by the loop above
negative = neg  # type: ignore[name-defined]  # noqa: F821
multiply = mul  # type: ignore[name-defined]  # noqa: F821
divide = div  # type: ignore[name-defined]  # noqa: F821


def _with_alpha(name: str, method):
    """torch.add / torch.sub (input, other, *, alpha=1, out=None): input +- alpha * other."""
    def fn(input, other, *, alpha=1, out=None):
        if alpha != 1:
            other = other * alpha
        return method(input, other, out=out)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"torch.{name}(input, other, *, alpha=1, out=None)."
    return fn


add = _with_alpha("add", add)  # type: ignore[has-type]  # noqa: F821
sub = _with_alpha("sub", sub)  # type: ignore[has-type]  # noqa: F821
subtract = sub

# Tensor-level functions with torch's out= (the methods above have it already).
cat = with_out("cat", cat)
stack = with_out("stack", stack)
matmul = with_out("matmul", matmul)
where = with_out("where", where)
gather = with_out("gather", gather)
index_select = with_out("index_select", index_select)
cumsum = with_out("cumsum", cumsum)
sort = with_out("sort", sort)
topk = with_out("topk", topk)
diag = with_out("diag", diag)
nonzero = with_out("nonzero", nonzero)
randperm = factory(variadic=False, size_keyword=False)(randperm)
multinomial = with_out("multinomial", multinomial)
concat = concatenate = cat


@functools.partial(with_out, "max")
def max(input, dim=None, keepdim: bool = False):  # noqa: A001 — torch.max
    """torch.max(x), torch.max(x, dim) -> (values, indices), torch.max(x, other) elementwise."""
    return _to_tensor(input).max(dim, keepdim)


@functools.partial(with_out, "min")
def min(input, dim=None, keepdim: bool = False):  # noqa: A001 — torch.min
    return _to_tensor(input).min(dim, keepdim)


def is_tensor(obj) -> bool:
    return isinstance(obj, Tensor)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    placement.check_device("as_tensor", device)
    if isinstance(data, Tensor) and (dtype is None or dtypes.to_dtype(dtype) is data.dtype):
        return data
    return data.to(dtype) if isinstance(data, Tensor) else tensor(data, dtype=dtype)


@factory(variadic=False, size_keyword=False, takes_memory_format=True)
def zeros_like(input: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("zeros_like", device)
    return zeros(input.shape, dtype=dtype or input.dtype, requires_grad=requires_grad)



@factory(variadic=False, size_keyword=False, takes_memory_format=True)
def ones_like(input: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("ones_like", device)
    return full(input.shape, 1, dtype=dtype or input.dtype, requires_grad=requires_grad)


@factory(variadic=False, size_keyword=False, takes_memory_format=True)
def full_like(input: Tensor, fill_value, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("full_like", device)
    return full(input.shape, fill_value, dtype=dtype or input.dtype, requires_grad=requires_grad)


@factory(variadic=False, size_keyword=False, takes_memory_format=True)
def empty_like(input: Tensor, dtype=None, requires_grad: bool = False, device=None) -> Tensor:
    placement.check_device("empty_like", device)
    return uninitialized(input.shape, dtype or input.dtype, requires_grad)


@factory(takes_memory_format=True)
def empty(*size, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Zeros: anygpu never hands out uninitialised memory (torch's NaN fill under
    use_deterministic_algorithms; tensor/creation.uninitialized)."""
    placement.check_device("empty", device)
    return uninitialized(_as_shape("empty", size), dtype, requires_grad)


def _float_like(op: str, input: Tensor, dtype):
    """input's shape and the float dtype of a random tensor like it (input's by default)."""
    dtype = dtypes.to_dtype(dtype if dtype is not None else input.dtype, op)
    if not dtype.is_floating_point:
        raise ValueError(f"{op}: needs a float dtype, got {dtype}")
    return input.shape, dtype


@factory(variadic=False, size_keyword=False, takes_memory_format=True)
def rand_like(input: Tensor, dtype=None, device=None, requires_grad: bool = False, generator=None) -> Tensor:
    placement.check_device("rand_like", device)
    shape, dtype = _float_like("rand_like", input, dtype)
    return tensor(_generator_rng(generator).random(shape, dtype=np.float32), dtype=dtype, requires_grad=requires_grad)


@factory(variadic=False, size_keyword=False, takes_memory_format=True)
def randn_like(input: Tensor, dtype=None, device=None, requires_grad: bool = False, generator=None) -> Tensor:
    placement.check_device("randn_like", device)
    shape, dtype = _float_like("randn_like", input, dtype)
    return tensor(_generator_rng(generator).standard_normal(shape, dtype=np.float32), dtype=dtype,
                  requires_grad=requires_grad)


@factory(variadic=False, size_keyword=False, takes_memory_format=True)
def randint_like(input: Tensor, low, high=None, dtype=None, device=None, generator=None) -> Tensor:
    placement.check_device("randint_like", device)
    if high is None:
        low, high = 0, low
    values = _generator_rng(generator).integers(int(low), int(high), size=input.shape)
    return tensor(values, dtype=dtype or input.dtype)


@factory(variadic=False, size_keyword=False)
def eye(n: int, m: int | None = None, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    placement.check_device("eye", device)
    m = n if m is None else m
    return tensor(np.eye(int(n), int(m)), dtype=dtype or dtypes.default_float(), requires_grad=requires_grad)


@factory(variadic=False, size_keyword=False)
def linspace(start, end, steps: int, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    placement.check_device("linspace", device)
    values = np.linspace(float(start), float(end), int(steps))
    return tensor(values, dtype=dtype or dtypes.default_float(), requires_grad=requires_grad)


def isclose(input: Tensor, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Tensor:
    """|input - other| <= atol + rtol * |other| (NaNs equal only with equal_nan), as torch."""
    input, other = _to_tensor(input), _to_tensor(other)
    a, b = input.float(), other.float()
    close = (a - b).abs() <= (b.abs() * rtol + atol)
    close = close | (a == b)  # equal infinities
    if equal_nan:
        close = close | (a.isnan() & b.isnan())
    return close


def allclose(input: Tensor, other, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def get_default_dtype():
    return dtypes.default_float()


def set_default_dtype(d) -> None:
    """torch.set_default_dtype: float32 or float64 for Python floats and float factories."""
    dtypes.set_default_float(d)


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None,
                     sci_mode=None) -> None:
    """Accepted for compatibility; tensors print with numpy's formatting."""


class Size(tuple):
    """torch.Size: a tuple of dims with numel()."""

    def numel(self) -> int:
        return int(np.prod(self, dtype=np.int64))

    def __repr__(self) -> str:
        return f"torch.Size({list(self)})"


def _legacy_constructor(dtype):
    """torch.FloatTensor(data) / torch.FloatTensor(*sizes) (zeros), as old scripts call them."""
    def make(*args):
        if len(args) == 1 and not isinstance(args[0], (int, np.integer)):
            return tensor(args[0], dtype=dtype)
        return zeros(*args, dtype=dtype)
    return make


FloatTensor = _legacy_constructor(dtypes.float32)
LongTensor = _legacy_constructor(dtypes.int64)
IntTensor = _legacy_constructor(dtypes.int32)
BoolTensor = _legacy_constructor(dtypes.bool)
DoubleTensor = _legacy_constructor(dtypes.float64)


def broadcast_tensors(*tensors):
    from .ops.nd import broadcast_shapes
    shape = broadcast_shapes("broadcast_tensors", *(t.shape for t in tensors))
    return tuple(t if t.shape == shape else t.expand(shape) for t in tensors)


def hstack(tensors) -> Tensor:
    tensors = [_to_tensor(t) for t in tensors]
    return cat(tensors, 0 if builtins.all(t.ndim == 1 for t in tensors) else 1)  # `all` here is torch.all


def vstack(tensors) -> Tensor:
    return cat([t.reshape(1, -1) if t.ndim == 1 else t for t in (_to_tensor(t) for t in tensors)], 0)


@factory(variadic=False, size_keyword=False)
def logspace(start, end, steps: int, base: float = 10.0, dtype=None, device=None, requires_grad: bool = False):
    values = np.logspace(float(start), float(end), int(steps), base=base)
    return tensor(values, dtype=dtype or dtypes.default_float(), requires_grad=requires_grad)


def bernoulli(input: Tensor, p=None, generator=None) -> Tensor:
    """1 with probability input (or p) per element, else 0, in input's dtype (host draws)."""
    probs = input.numpy() if p is None else np.broadcast_to(p, input.shape)
    return tensor(_generator_rng(generator).random(input.shape) < probs, dtype=input.dtype)


def dist(input: Tensor, other, p: float = 2.0) -> Tensor:
    return (input - other).norm(p)


def std_mean(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    return input.std(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim)


def var_mean(input: Tensor, dim=None, unbiased=None, keepdim: bool = False, *, correction=None):
    return input.var(dim, unbiased, keepdim, correction=correction), input.mean(dim, keepdim)


def bitwise_and(input: Tensor, other) -> Tensor:
    return input & other


def bitwise_or(input: Tensor, other) -> Tensor:
    return input | other


def bitwise_xor(input: Tensor, other) -> Tensor:
    return input ^ other


def bitwise_not(input: Tensor) -> Tensor:
    return ~input


def fmax(input: Tensor, other) -> Tensor:
    """The larger of each pair, a NaN only where both are NaN (torch.fmax; maximum propagates NaN)."""
    other = _to_tensor(other, like=input)
    return where(input.isnan(), other, where(other.isnan(), input, input.maximum(other)))


def fmin(input: Tensor, other) -> Tensor:
    """The smaller of each pair, a NaN only where both are NaN (torch.fmin)."""
    other = _to_tensor(other, like=input)
    return where(input.isnan(), other, where(other.isnan(), input, input.minimum(other)))


def heaviside(input: Tensor, values) -> Tensor:
    """`values` where input == 0, else 1 where input > 0 and 0 elsewhere (NaN too), as torch."""
    values = _to_tensor(values, like=input)
    return where(input == 0, values, where(input > 0, ones_like(input), zeros_like(input)))


def diag_embed(input: Tensor, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """Each last-dim vector of input as the diagonal (at `offset`) of a square matrix; the
    matrices' dims are dim1 and dim2 of the result (torch.diag_embed)."""
    n = input.shape[-1] + builtins.abs(int(offset))
    size = input.shape[-1]
    rows = np.arange(size) + builtins.max(-int(offset), 0)
    cols = np.arange(size) + builtins.max(int(offset), 0)
    positions = tensor((rows * n + cols).astype(np.int32))
    flat = zeros(*input.shape[:-1], n * n, dtype=input.dtype)
    out = flat.index_add(-1, positions, input).reshape(*input.shape[:-1], n, n)
    ndim = out.ndim
    d1, d2 = dim1 % ndim, dim2 % ndim
    if d1 == d2:
        raise ValueError(f"diag_embed: dim1 and dim2 must differ, got {dim1} and {dim2}")
    if (d1, d2) == (ndim - 2, ndim - 1):
        return out
    # place the matrix dims at d1 and d2, the batch dims in order elsewhere
    batch = [d for d in builtins.range(ndim) if d not in (d1, d2)]
    order = [0] * ndim
    for source, target in enumerate(batch):
        order[target] = source
    order[d1], order[d2] = ndim - 2, ndim - 1
    return out.permute(*order)


# torch-compat additions (tensor/compat_*.py): their FUNCTIONS as torch.<name>
def _add_compat_functions() -> None:
    from .tensor import compat_linalg, compat_math, compat_misc, compat_reduce, compat_shape

    for module in (compat_math, compat_reduce, compat_shape, compat_misc, compat_linalg):
        for name, fn in module.FUNCTIONS.items():
            if name in globals():
                raise AttributeError(f"compat: torch.{name} exists already; remove it from FUNCTIONS")
            globals()[name] = fn
            __all__.append(name)


_add_compat_functions()
