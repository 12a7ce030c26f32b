"""torch.linalg's norms: vector_norm, matrix_norm and norm, as torch computes them (the
gradient of a p-norm at a zero vector is zero, as torch's, not NaN). Decompositions (svd,
qr, eigh, solve, inv, det) are not here: anygpu has no float64 and no such kernels yet."""

from __future__ import annotations

import math

from .custom_function import Function
from .tensor import Tensor, _to_tensor, where, zeros_like

__all__ = ["vector_norm", "matrix_norm", "norm"]


def _dims(x: Tensor, dim) -> tuple | None:
    if dim is None:
        return None
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    return tuple(d % x.ndim if x.ndim else 0 for d in dims)


class _PNorm(Function):
    """(sum |x|^p)^(1/p) over dims; backward g * sign(x) |x|^(p-1) / n^(p-1), zero where n is."""

    @staticmethod
    def forward(ctx, x, p, dims, keepdim):
        total = (x * x).sum(dims, True) if p == 2 else (x.abs() ** p).sum(dims, True)
        kept = total.sqrt() if p == 2 else total ** (1.0 / p)
        ctx.save_for_backward(x, kept)
        ctx.p, ctx.dims, ctx.keepdim = p, dims, keepdim
        if keepdim:
            return kept
        return kept.reshape(*[s for d, s in enumerate(kept.shape) if d not in (dims or range(x.ndim))])

    @staticmethod
    def backward(ctx, grad):
        x, kept = ctx.saved_tensors
        p = ctx.p
        g = grad.reshape(kept.shape)
        safe = where(kept == 0, zeros_like(kept) + 1, kept)
        if p == 2:
            scaled = x / safe
        elif p == 1:
            scaled = x.sign() + zeros_like(kept)
        else:
            scaled = x.sign() * x.abs() ** (p - 1) / safe ** (p - 1)
        return where(kept == 0, zeros_like(x), scaled * g), None, None, None


def vector_norm(x, ord=2, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """The ord-norm of x's elements over dim (all of them when None): ord a positive number,
    0 (count of non-zeros), inf or -inf (largest / smallest magnitude)."""
    x = _to_tensor(x)
    if not x.dtype.is_floating_point:
        raise ValueError(f"linalg.vector_norm: expected a float tensor, got dtype {x.dtype}")
    dims = _dims(x, dim)
    ord = float(ord)
    if ord == math.inf:
        return x.abs().amax(dims, keepdim)
    if ord == -math.inf:
        return x.abs().amin(dims, keepdim)
    if ord == 0:
        return (x != 0).float().sum(dims, keepdim)
    if ord < 0:
        return (x.abs() ** ord).sum(dims, keepdim) ** (1.0 / ord)
    return _PNorm.apply(x, ord, dims, keepdim)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim: bool = False, *, dtype=None) -> Tensor:
    """The ord-norm of the matrices in dims `dim`: 'fro', 1 / -1 (largest / smallest column
    sum of magnitudes), inf / -inf (rows). 'nuc', 2 and -2 need singular values: refused."""
    A = _to_tensor(A)
    if A.ndim < 2:
        raise ValueError(f"linalg.matrix_norm: expected a tensor with at least 2 dims, got shape {A.shape}")
    rows, cols = (d % A.ndim for d in dim)
    if ord == "fro":
        return vector_norm(A, 2, (rows, cols), keepdim)
    if ord in ("nuc", 2, -2):
        raise ValueError(f"linalg.matrix_norm: ord={ord!r} needs singular values, which anygpu does not compute")
    if ord in (1, -1):
        sums = A.abs().sum(rows, True)
        out = sums.amax(cols, True) if ord == 1 else sums.amin(cols, True)
    elif ord in (math.inf, -math.inf):
        sums = A.abs().sum(cols, True)
        out = sums.amax(rows, True) if ord == math.inf else sums.amin(rows, True)
    else:
        raise ValueError(f"linalg.matrix_norm: ord must be 'fro', 1, -1, inf or -inf, got {ord!r}")
    return out if keepdim else out.squeeze(max(rows, cols)).squeeze(min(rows, cols))


def norm(A, ord=None, dim=None, keepdim: bool = False, *, dtype=None) -> Tensor:
    """torch.linalg.norm: with ord None, the 2-norm of the elements (over dim when given);
    a vector norm for one dim, a matrix norm for two (or for a 2-D input with ord given)."""
    A = _to_tensor(A)
    dims = (dim,) if isinstance(dim, int) else dim
    if ord is None:
        return vector_norm(A, 2, dims, keepdim)
    if dims is None:
        if A.ndim == 2:
            return matrix_norm(A, ord, (-2, -1), keepdim)
        if A.ndim == 1:
            return vector_norm(A, ord, None, keepdim)
        raise ValueError(f"linalg.norm: ord={ord!r} needs dim for a {A.ndim}-D input (1-D or 2-D otherwise)")
    if len(dims) == 1:
        return vector_norm(A, ord, dims, keepdim)
    if len(dims) == 2:
        return matrix_norm(A, ord, dims, keepdim)
    raise ValueError(f"linalg.norm: dim must name 1 or 2 dims, got {dim!r}")
