"""torch-compat additions (see compat_common.py) for reductions, statistics and whole-tensor
comparisons: nansum, nanmean, nanmedian, nanquantile, logcumsumexp, cov, corrcoef, msort,
unique_consecutive, trapezoid / trapz / cumulative_trapezoid, sum_to_size, and the methods
torch has beside existing functions (dist, where).

Each is composed of existing Tensor ops, so autograd, dtypes and NaN rules come from them;
logcumsumexp and the all-elements nanmedian carry torch's own gradient rule (autograd.Function).
unique_consecutive reads the tensor back to the host, as unique does (its size depends on the
data)."""

from __future__ import annotations

import math
import warnings
from collections import namedtuple

import numpy as np

from .. import dtypes
from ..dtypes import int64
from .compat_common import method_function
from .core import MaxResult, Tensor, _as_shape, _dim, bool_
from .creation import tensor, zeros
from .elementwise import _cast, _to_tensor
from .function import Function
from .grad_mode import no_grad
from .indexing import gather, where
from .reductions import _in_float32
from .shape import _moved_back, _moved_last, cat
from .sorting import sort

_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _floating(op: str, x: Tensor) -> None:
    if not x.dtype.is_floating_point:
        raise ValueError(f"{op}: expected a floating point input, got dtype {x.dtype}")


# ------------------------------------------------------------------ NaN-ignoring reductions
def nansum(self: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The sum over dim (all dims by default) with NaN counted as zero; integers sum to int64.
    A NaN's gradient is 0, as torch's."""
    x = self if dtype is None else self.to(dtype)
    if x.dtype.is_floating_point:
        x = where(x.isnan(), 0.0, x)
    return x.sum(dim, keepdim)


def nanmean(self: Tensor, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The mean of the non-NaN values over dim (all dims by default): NaN where none is left.
    A NaN's gradient is 0 (torch's is NaN in a group of NaN only: inf * 0 in its rule)."""
    x = self if dtype is None else self.to(dtype)
    if not x.dtype.is_floating_point:
        raise ValueError(f"nanmean: expected input to have a floating point dtype, got {x.dtype}")
    count = (~x.isnan()).sum(dim, keepdim)
    return nansum(x, dim, keepdim) / _cast(count, x.dtype)


class _EvenlySpread(Function):
    """A value picked out of x (a median): its gradient shared evenly among the elements equal
    to it (NaN counting as equal to NaN), torch's evenly_distribute_backward."""

    @staticmethod
    def forward(ctx, x, value):
        ctx.save_for_backward(x, value)
        return value.clone()

    @staticmethod
    def backward(ctx, grad):
        x, value = ctx.saved_tensors
        hits = (x == value) | (x.isnan() & value.isnan())
        share = grad.float() / _cast(hits.sum(), dtypes.float32)  # (where wants f32 beside a number)
        return where(hits, share, 0.0).to(x.dtype), None


def nanmedian(self: Tensor, dim=None, keepdim: bool = False):
    """The lower median of the non-NaN values: a 0-d tensor (dim None; its gradient shared
    among the values equal to it, as torch), or (values, indices) along dim, the index of the
    median in a stable sort (torch's choice; a row of NaN only gives NaN and index 0)."""
    if dim is None:
        flat = self.reshape(-1)
        if flat.numel() == 0:
            return (self.sum() * math.nan) if self.dtype.is_floating_point else self.sum()
        value = nanmedian(flat, 0).values
        if not (self.requires_grad and self.dtype.is_floating_point):
            return value
        return _EvenlySpread.apply(self, value.detach())
    if self.ndim == 0:
        _dim("nanmedian", dim, 1)
        return MaxResult(self * 1, zeros((), dtype=int64))
    d = _dim("nanmedian", dim, self.ndim)
    n = self.shape[d]
    if n == 0:
        raise IndexError(f"nanmedian: expected reduction dim {d} of shape {self.shape} to have non-zero size")
    with no_grad():
        order = sort(self.detach(), d).indices
        if self.dtype.is_floating_point:
            valid = (~self.isnan()).sum(d, keepdim=True)
            middle = where(valid > 0, (valid - 1) // 2, 0)
        else:
            middle = zeros(order.shape[:d] + (1,) + order.shape[d + 1:], dtype=int64) + (n - 1) // 2
        index = gather(order, d, middle)
    values = gather(self, d, index)
    if not keepdim:
        values, index = values.squeeze(d), index.squeeze(d)
    return MaxResult(values, index)


def nanquantile(self: Tensor, q, dim=None, keepdim: bool = False, *, interpolation: str = "linear") -> Tensor:
    """The q-th quantiles (q a number or a 1-D tensor in [0, 1]) of the non-NaN values over dim
    (the flattened input by default), as torch: rank q * (count - 1) in the sorted values,
    rounded or interpolated per `interpolation`; NaN where a row holds NaN only. A 1-D q puts
    its quantiles first: (len(q), *reduced shape)."""
    _floating("nanquantile", self)
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(f"nanquantile: interpolation must be one of {', '.join(_INTERPOLATIONS)}, "
                         f"got {interpolation!r}")
    q_tensor = isinstance(q, Tensor)
    q_values = np.asarray(q.tolist() if q_tensor else q, dtype=np.float64)
    if q_values.ndim > 1:
        raise ValueError(f"nanquantile: q must be a scalar or a 1-D tensor, got shape {tuple(q_values.shape)}")
    if q_values.size and not ((q_values >= 0) & (q_values <= 1)).all():
        raise ValueError(f"nanquantile: q must be in the range [0, 1], got {q_values.tolist()}")
    if self.numel() == 0:
        raise ValueError(f"nanquantile: input tensor must be non-empty, got shape {self.shape}")
    if dim is None:
        x, d = self.reshape(-1), 0
    else:
        d = _dim("nanquantile", dim, self.ndim)
        x = self.reshape(1) if self.ndim == 0 else self
    ordered = sort(x, d).values  # NaN sorts last
    valid = _cast((~x.isnan()).sum(d, keepdim=True), x.dtype)
    outs = []
    for value in q_values.reshape(-1):
        with no_grad():
            rank = (valid - 1) * float(value)
            rank = where(rank < 0, 0.0, rank)  # a row of NaN: rank 0, the NaN at its start
            if interpolation == "lower":
                rank = rank.floor()
            elif interpolation == "higher":
                rank = rank.ceil()
            elif interpolation == "nearest":
                rank = rank.round()
            below_index = _cast(rank.floor(), int64)
            above_index = _cast(rank.ceil(), int64)
            weight = rank - rank.floor() if interpolation == "linear" else 0.5 + 0 * rank
        below = gather(ordered, d, below_index)
        if interpolation in ("linear", "midpoint"):
            above = gather(ordered, d, above_index)
            gap = above - below  # torch's lerp: from the nearer end, exact at weight 0 and 1
            below = where(weight < 0.5, below + gap * weight, above - gap * (1 - weight))
        if dim is None:
            below = below.reshape((1,) * self.ndim) if keepdim else below.reshape(())
        elif not keepdim or self.ndim == 0:
            below = below.squeeze(d)
        outs.append(below)
    if q_values.ndim == 0:
        return outs[0]
    if not outs:
        return zeros((0,) + _quantile_shape(self, dim, keepdim), dtype=self.dtype)
    return cat([o.unsqueeze(0) for o in outs], 0)


def _quantile_shape(x: Tensor, dim, keepdim: bool) -> tuple:
    """The shape of one quantile of x reduced over dim."""
    if dim is None:
        return (1,) * x.ndim if keepdim else ()
    d = _dim("nanquantile", dim, x.ndim)
    return x.shape[:d] + ((1,) if keepdim else ()) + x.shape[d + 1:] if x.ndim else ()


# ------------------------------------------------------------------ logcumsumexp
def _logaddexp(a: Tensor, b: Tensor) -> Tensor:
    """log(exp(a) + exp(b)) around the larger one; equal infinities (where a - b is NaN)
    give themselves."""
    gap = where(a == b, 0.0, (a - b).abs())
    return a.maximum(b) + (-gap).exp().log1p()


def _logcumsumexp_values(moved: Tensor) -> Tensor:
    """Running log-sum-exp along the last dim by log2(n) doubling steps (Hillis-Steele)."""
    n = moved.shape[-1]
    out, shift = moved.clone(), 1
    while shift < n:
        out = cat([out[..., :shift], _logaddexp(out[..., shift:], out[..., :n - shift])], -1)
        shift *= 2
    return out


class _LogCumSumExp(Function):
    """Forward by _logcumsumexp_values; backward as torch's: the positive and the negative
    parts of grad each through a reversed logcumsumexp in log space,
    grad_x = exp(rlcse(log(grad+) - out) + x) - exp(rlcse(log(grad-) - out) + x)."""

    @staticmethod
    def forward(ctx, moved):
        out = _logcumsumexp_values(moved)
        ctx.save_for_backward(moved, out)
        return out

    @staticmethod
    def backward(ctx, grad):
        moved, out = ctx.saved_tensors
        # torch's stand-in for log(0): the lowest finite value (float32's: a float64 one does not
        # pass as a kernel's f32 parameter; the two differ only beside an output of -inf)
        lowest = float(np.finfo(np.float32).min)
        log_abs = grad.abs().log()

        def part(mask):
            log_grad = where(mask, log_abs, lowest) - out
            reversed_lcse = _logcumsumexp_values(log_grad.flip(-1)).flip(-1)
            return (reversed_lcse + moved).exp()
        return part(grad > 0) - part(grad < 0)


@_in_float32
def logcumsumexp(self: Tensor, dim: int) -> Tensor:
    """log(cumsum(exp(x))) along dim, computed pairwise in log space (numerically stable; an
    infinity or NaN carries on to the end of the row, as torch). Float inputs only."""
    _floating("logcumsumexp", self)
    if self.ndim == 0:
        _dim("logcumsumexp", dim, 1)
        return self.clone()
    moved, d = _moved_last(self, dim, "logcumsumexp")
    return _moved_back(_LogCumSumExp.apply(moved), d, self.ndim)


# ------------------------------------------------------------------ statistics
def _check_weights(name: str, weights, observations: int, integral: bool) -> Tensor:
    weights = _to_tensor(weights)
    if weights.ndim > 1:
        raise ValueError(f"cov: expected {name} to have one or fewer dimensions, got {weights.ndim}")
    if weights.numel() != observations:
        raise ValueError(f"cov: expected {name} to have the same numel as there are observations in the input, "
                         f"got {weights.numel()} and {observations}")
    if integral and (weights.dtype.is_floating_point or weights.dtype is bool_):
        raise ValueError(f"cov: expected fweights to have an integral dtype, got {weights.dtype}")
    if not integral and not weights.dtype.is_floating_point:
        raise ValueError(f"cov: expected aweights to have a floating point dtype, got {weights.dtype}")
    if observations and float(weights.detach().min().item()) < 0:
        raise ValueError(f"cov: {name} cannot be negative")
    return weights


def cov(self: Tensor, *, correction: int = 1, fweights=None, aweights=None) -> Tensor:
    """The covariance matrix of the variables in the rows of self (2-D: variables x
    observations; 1-D: one variable, a 0-d result), divided by the (weighted) count minus
    `correction`; fweights (integer repeat counts) and aweights (float importances) weigh the
    observations, as torch and numpy.cov."""
    if self.ndim > 2:
        raise ValueError(f"cov: expected input to have two or fewer dimensions, got {self.ndim}")
    if self.dtype is bool_:
        raise ValueError("cov: bool dtype is not supported for input")
    x = self.reshape(1, -1) if self.ndim < 2 else self
    if not x.dtype.is_floating_point:
        x = x.to(dtypes.default_float())
    observations = x.shape[1]
    weights = None
    if fweights is not None:
        weights = _check_weights("fweights", fweights, observations, integral=True)
    if aweights is not None:
        aweights = _check_weights("aweights", aweights, observations, integral=False)
        weights = aweights if weights is None else weights * aweights
    total = weights.sum() if weights is not None else float(observations)
    mean = (x * weights if weights is not None else x).sum(1) / total
    if weights is not None and aweights is not None and correction != 0:
        norm = total - correction * (weights * aweights).sum() / total
    else:
        norm = total - correction
    if float(norm.detach().item() if isinstance(norm, Tensor) else norm) <= 0:
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less than the number of "
                      "observations.", UserWarning, stacklevel=2)
        norm = norm * 0 if isinstance(norm, Tensor) else 0.0
    centered = x - mean.unsqueeze(1)
    product = centered @ (centered * weights if weights is not None else centered).t()
    return (product / norm).squeeze()


def corrcoef(self: Tensor) -> Tensor:
    """Pearson correlation coefficients of the variables in the rows of self (cov divided by
    the outer product of the standard deviations), clipped to [-1, 1]; 1-D: a 0-d 1 (NaN for
    a constant)."""
    c = cov(self)
    if c.ndim == 0:
        return c / c
    spread = c.diagonal().sqrt()
    c = c / spread.unsqueeze(1) / spread.unsqueeze(0)
    return c.clamp(-1, 1)


def msort(self: Tensor) -> Tensor:
    """The values sorted along dim 0 (NaN last)."""
    return sort(self, 0).values


def unique_consecutive(self: Tensor, return_inverse: bool = False, return_counts: bool = False, dim=None):
    """Each run of equal consecutive elements (dim None: of the flattened tensor) or of equal
    consecutive slices along dim kept once, as torch (NaN equals nothing); with the inverse
    (each element's or slice's run) and the run lengths, int64. Read back to the host."""
    host = self.numpy()
    if dim is None:
        flat = host.reshape(-1)
        starts = np.concatenate([[True], flat[1:] != flat[:-1]]) if flat.size else np.zeros(0, bool)
        values = flat[starts]
        inverse = (np.cumsum(starts) - 1).reshape(host.shape)
    else:
        if self.ndim == 0:
            raise IndexError(f"unique_consecutive: dimension {dim} out of range for a tensor of 0 dims")
        d = _dim("unique_consecutive", dim, self.ndim)
        moved = np.moveaxis(host, d, 0)
        if moved.size == 0 and moved.shape[0]:
            raise ValueError(f"unique_consecutive: the tensor of shape {self.shape} has 0-sized dimensions besides "
                             f"dim {d}, so unique cannot be applied")
        rows = moved.reshape(moved.shape[0], int(np.prod(moved.shape[1:])))
        starts = np.concatenate([[True], (rows[1:] != rows[:-1]).any(axis=1)]) if len(rows) else np.zeros(0, bool)
        values = np.moveaxis(moved[starts], 0, d)
        inverse = np.cumsum(starts) - 1
    out = [tensor(np.ascontiguousarray(values), dtype=self.dtype)]
    if return_inverse:
        out.append(tensor(inverse.astype(np.int64), dtype=int64))
    if return_counts:
        counts = np.diff(np.append(np.flatnonzero(starts), starts.size))
        out.append(tensor(counts.astype(np.int64), dtype=int64))
    return out[0] if len(out) == 1 else tuple(out)


# ------------------------------------------------------------------ integration
def _spacing(op: str, y: Tensor, x, d: int) -> Tensor:
    """The steps of the sample points x along dim d: a 1-D x of one value per sample point
    lies along d, a shorter x is broadcast from the left, as torch."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: x must be a Tensor, got {type(x).__name__} (use dx= for a constant spacing)")
    if x.dtype is bool_:
        raise ValueError(f"{op}: x of dtype bool is not supported")
    if x.ndim == 1:
        if x.shape[0] != y.shape[d]:
            raise ValueError(f"{op}: there must be one x value for each sample point, got {x.shape[0]} x values "
                             f"and {y.shape[d]} points along dim {d}")
        x = x.reshape(tuple(x.shape[0] if i == d else 1 for i in range(y.ndim)))
    elif x.ndim < y.ndim:
        x = x.reshape((1,) * (y.ndim - x.ndim) + x.shape)
    size = x.shape[d]
    return x.narrow(d, 1, max(size - 1, 0)) - x.narrow(d, 0, max(size - 1, 0))


def _integrand(op: str, y: Tensor, x, dx, dim: int) -> tuple[int, int]:
    if x is not None and dx is not None:
        raise TypeError(f"{op}: give x or dx, not both")
    if y.ndim == 0:
        raise IndexError(f"{op}: dimension {dim} specified but y has no dimensions")
    if y.dtype is bool_:
        raise ValueError(f"{op}: y of dtype bool is not supported")
    d = _dim(op, dim, y.ndim)
    return d, y.shape[d]


def trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """The trapezoidal rule along dim: sum((y[i] + y[i+1]) / 2 * step) with the steps of the
    sample points x, or a constant dx (1 by default); 0 for fewer than two points."""
    y = _to_tensor(y)
    d, n = _integrand("trapezoid", y, x, dx, dim)
    if n == 0:
        return zeros(y.shape[:d] + y.shape[d + 1:], dtype=y.dtype)
    if x is None:
        ends = y.select(d, 0) + y.select(d, -1)
        return (y.sum(d) - ends * 0.5) * (1 if dx is None else dx)
    steps = _spacing("trapezoid", y, x, d)
    return (steps * (y.narrow(d, 1, n - 1) + y.narrow(d, 0, n - 1))).sum(d) / 2


def trapz(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """torch.trapz: trapezoid."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y: Tensor, x=None, *, dx=None, dim: int = -1) -> Tensor:
    """The running trapezoidal rule along dim: n - 1 partial integrals for n points."""
    y = _to_tensor(y)
    d, n = _integrand("cumulative_trapezoid", y, x, dx, dim)
    pairs = y.narrow(d, 1, max(n - 1, 0)) + y.narrow(d, 0, max(n - 1, 0))
    if x is None:
        areas = pairs * ((1 if dx is None else dx) / 2.0)
    else:
        areas = _spacing("cumulative_trapezoid", y, x, d) / 2.0 * pairs
    if not areas.dtype.is_floating_point:
        areas = areas.to(dtypes.default_float())
    return areas.cumsum(d)


_Histogram = namedtuple("histogram", ["hist", "bin_edges"])  # type: ignore[name-match]  # torch.return_types.histogram


def _linspace32(start: float, end: float, steps: int) -> np.ndarray:
    """torch.linspace's float32 values: from the start for the first half, from the end after."""
    start32, end32 = np.float32(start), np.float32(end)
    step = np.float32((end32 - start32) / np.float32(steps - 1))
    index = np.arange(steps, dtype=np.float32)
    return np.where(np.arange(steps) < steps // 2, start32 + step * index,
                    end32 - step * (np.float32(steps - 1) - index)).astype(np.float32)


def histogram(self: Tensor, bins, *, range=None, weight=None, density: bool = False):  # noqa: A002 — torch's name
    """(hist, bin_edges), as torch: `bins` equal bins over `range` (the data's min and max by
    default, [0, 1] for no data, one unit wide around a single value) or the given 1-D edges; each bin holds its
    left edge, the last its right edge too; values outside are left out. weight: one per
    element; density: hist divided by its total times the bin widths. Float inputs only."""
    _floating("histogram", self)
    flat = self.detach().reshape(-1)
    if isinstance(bins, Tensor):
        if bins.ndim != 1 or bins.numel() < 1:
            raise ValueError(f"histogram: bins must be a 1-D tensor of at least one edge, got shape {bins.shape}")
        edges = bins.detach().to(self.dtype)
    else:
        if int(bins) <= 0:
            raise ValueError(f"histogram: bins must be > 0, got {bins}")
        if range is not None:
            low, high = float(range[0]), float(range[1])
        elif flat.numel():
            low, high = float(flat.amin().item()), float(flat.amax().item())
        else:
            low, high = 0.0, 1.0  # no data: torch's [0, 1]
        if not (math.isfinite(low) and math.isfinite(high)):
            raise ValueError(f"histogram: range of [{low}, {high}] is not finite")
        if low > high:
            raise ValueError(f"histogram: min should not exceed max, got min {low} max {high}")
        if low == high:
            low, high = low - 0.5, high + 0.5
        edges = tensor(_linspace32(low, high, int(bins) + 1), dtype=self.dtype)
    count = edges.numel() - 1
    with no_grad():
        slot = (flat.unsqueeze(-1) >= edges).sum(-1) - 1  # the last edge at or below each value
        inside = (slot >= 0) & ((slot < count) | (flat == edges[-1])) if count else slot < -1
        slot = where(slot >= count, count - 1, slot)
        slot = where(inside, slot, 0)
        mass = _cast(inside, self.dtype) if weight is None else where(inside, _to_tensor(weight).reshape(-1), 0.0)
        hist = zeros(count, dtype=self.dtype).index_add(0, slot, mass.to(self.dtype)) if count else zeros(0)
        if density:
            hist = hist / (hist.sum() * (edges[1:] - edges[:-1]))
    return _Histogram(hist, edges)


# ------------------------------------------------------------------ shapes of reductions, comparisons
def sum_to_size(self: Tensor, *size) -> Tensor:
    """self summed over the dims that broadcasting `size` to self's shape would expand (the
    inverse of expand): a tensor of shape `size`."""
    shape = _as_shape("sum_to_size", size)
    lead = self.ndim - len(shape)
    if lead < 0 or any(s != 1 and s != self.shape[lead + i] for i, s in enumerate(shape)):
        raise ValueError(f"sum_to_size: size {list(shape)} is not expandable to size {list(self.shape)}")
    dims = list(range(lead)) + [lead + i for i, s in enumerate(shape) if s == 1 and self.shape[lead + i] != 1]
    if not dims:
        return self
    return self.sum(dims, keepdim=True).reshape(shape)


def _dist(self: Tensor, other, p: float = 2.0) -> Tensor:
    from ..functions import dist
    return dist(self, other, p)


def _where(self: Tensor, condition, other) -> Tensor:
    """self where condition holds, else other (torch's Tensor.where(condition, y))."""
    return where(condition, self, other)


def _name(fn, name: str):
    fn.__name__ = fn.__qualname__ = name
    return fn


METHODS: dict = {
    "nansum": nansum, "nanmean": nanmean, "nanmedian": nanmedian, "nanquantile": nanquantile,
    "logcumsumexp": logcumsumexp, "cov": cov, "corrcoef": corrcoef, "msort": msort,
    "unique_consecutive": unique_consecutive, "sum_to_size": sum_to_size, "histogram": histogram,
    "dist": _name(_dist, "dist"), "where": _name(_where, "where"),
}

FUNCTIONS: dict = {
    **{name: method_function(name) for name in ("nansum", "nanmean", "nanmedian", "nanquantile", "logcumsumexp",
                                                "msort", "histogram")},
    **{name: method_function(name, out=False) for name in ("cov", "corrcoef", "unique_consecutive")},
    "trapezoid": trapezoid, "trapz": trapz, "cumulative_trapezoid": cumulative_trapezoid,
}
