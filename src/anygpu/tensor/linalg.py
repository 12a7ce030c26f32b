"""torch.linalg's norms: vector_norm, matrix_norm and norm, as torch computes them (the
gradient of a p-norm at a zero vector is zero, as torch's, not NaN); and det, slogdet,
solve and inv from an LU factorization with partial pivoting written in Tensor ops (n
elimination steps of a few batched ops each, so the gradients follow by autograd; meant
for the small matrices such code meets, in float32). svd, qr and eigh are not here."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ..dtypes import float32, float64
from ..ops.nd import broadcast_shapes
from .core import Tensor
from .creation import arange, ones, tensor, zeros_like
from .elementwise import _to_tensor
from .function import Function
from .indexing import where
from .shape import cat

__all__ = ["vector_norm", "matrix_norm", "norm", "det", "slogdet", "solve", "inv"]

SlogdetResult = namedtuple("SlogdetResult", ["sign", "logabsdet"])


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


# ---------------------------------------------------------------------------- LU and what uses it


class LinAlgError(RuntimeError):
    """torch.linalg.LinAlgError: a matrix the factorization cannot handle (singular, not
    positive-definite); a RuntimeError, as torch's."""


def _square(op: str, A) -> Tensor:
    A = _to_tensor(A)
    if A.ndim < 2 or A.shape[-1] != A.shape[-2]:
        raise ValueError(f"{op}: expected square matrices (..., n, n), got shape {A.shape}")
    if not A.dtype.is_floating_point:
        raise ValueError(f"{op}: expected a float tensor, got {A.dtype}")
    return A if A.dtype in (float32, float64) else A.float()  # float64 stays float64, as torch


def _lu(A: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(L below the diagonal and U on and above it in one matrix, the rows' order, the row
    permutation's sign) with P A = L U: at step k the row of largest |entry| in column k (at or
    below k) is swapped up; a zero pivot leaves its column's multipliers at zero (singular)."""
    n, batch = A.shape[-1], A.shape[:-2]
    lu = A
    order = arange(n).expand(*batch, n) if batch else arange(n)
    sign = ones(batch) if batch else ones(())
    ar = arange(n)
    for k in range(n):
        p = lu[..., k:, k].abs().argmax(-1) + k
        pk = p.unsqueeze(-1)
        swap = where(ar == k, pk, where(ar == pk, k, ar))  # rows k and p exchanged
        lu = lu.gather(-2, swap.unsqueeze(-1).expand(*batch, n, n))
        order = order.gather(-1, swap)
        sign = where(p == k, sign, -sign)
        if k == n - 1:
            break
        pivot = lu[..., k, k].unsqueeze(-1)
        singular = pivot == 0
        factors = where(singular, 0.0, lu[..., k + 1:, k] / where(singular, 1.0, pivot))
        rest = lu[..., k + 1:, k + 1:] - factors.unsqueeze(-1) * lu[..., k, k + 1:].unsqueeze(-2)
        below = cat([factors.unsqueeze(-1), rest], -1)
        if k:
            below = cat([lu[..., k + 1:, :k], below], -1)
        lu = cat([lu[..., :k + 1, :], below], -2)
    return lu, order, sign


def slogdet(A) -> SlogdetResult:
    """(sign, log|det|) of square matrices: sign 0 and -inf for singular ones, as torch."""
    A = _square("linalg.slogdet", A)
    lu, _, sign = _lu(A)
    diag = lu.diagonal(0, -2, -1)
    return SlogdetResult(sign * diag.sign().prod(-1), diag.abs().log().sum(-1))


def det(A) -> Tensor:
    """Determinants of square matrices (..., n, n) -> (...)."""
    A = _square("linalg.det", A)
    lu, _, sign = _lu(A)
    return sign * lu.diagonal(0, -2, -1).prod(-1)


def logdet(A) -> Tensor:
    """log det: NaN where the determinant is negative, -inf where it is zero, as torch.logdet."""
    sign, logabs = slogdet(A)
    return where(sign < 0, math.nan, logabs)


def solve(A, B, *, left: bool = True) -> Tensor:
    """X with A X = B (B (..., n, k), or (..., n) for one vector), batch dims broadcast; a
    singular A (a zero pivot) is torch's LinAlgError."""
    if not left:
        raise ValueError("linalg.solve: left=False is not supported")
    A, B = _square("linalg.solve", A), _to_tensor(B)
    n = A.shape[-1]
    vector = B.ndim == A.ndim - 1 and B.shape[-1] == n
    if vector:
        B = B.unsqueeze(-1)
    if B.ndim < 2 or B.shape[-2] != n:
        raise ValueError(f"linalg.solve: B of shape (..., {n}, k) or (..., {n}) expected for A of shape "
                         f"{A.shape}, got {B.shape if not vector else B.squeeze(-1).shape}")
    batch = broadcast_shapes("linalg.solve", A.shape[:-2], B.shape[:-2])
    A = A.expand(*batch, n, n) if A.shape[:-2] != batch else A
    B = B.to(A.dtype)
    B = B.expand(*batch, n, B.shape[-1]) if B.shape[:-2] != batch else B
    lu, order, _ = _lu(A)
    diag = lu.diagonal(0, -2, -1)
    zero = (diag == 0).any(-1)
    if bool(zero.any().item()):
        raise LinAlgError("linalg.solve: The solver failed because the input matrix is singular.")
    rows = B.gather(-2, order.unsqueeze(-1).expand(*batch, n, B.shape[-1]))
    found = [rows[..., :1, :]]  # L y = P b, L unit lower triangular
    for i in range(1, n):
        found.append(rows[..., i:i + 1, :] - lu[..., i:i + 1, :i] @ cat(found, -2))
    y = cat(found, -2)
    solved = [y[..., n - 1:, :] / lu[..., n - 1:, n - 1:]]  # U x = y, from the last row up
    for i in range(n - 2, -1, -1):
        rest = lu[..., i:i + 1, i + 1:] @ cat(solved, -2)
        solved.insert(0, (y[..., i:i + 1, :] - rest) / lu[..., i:i + 1, i:i + 1])
    x = cat(solved, -2)
    return x.squeeze(-1) if vector else x


def inv(A) -> Tensor:
    """Inverses of square matrices; a singular one is torch's LinAlgError."""
    A = _square("linalg.inv", A)
    n = A.shape[-1]
    try:
        return solve(A, tensor(np.eye(n), dtype=A.dtype).expand(*A.shape))
    except LinAlgError:
        raise LinAlgError("linalg.inv: The diagonal element of its LU factorization is zero, the inversion "
                          "could not be completed because the input matrix is singular.") from None
