"""torch-compat additions (see compat_common.py): the legacy linear-algebra forms at torch's
top level and on Tensor -- svd (U, S, V), qr (some=), cholesky, pinverse, cholesky_solve,
cholesky_inverse, triangular_solve -- written through torch.linalg's (tensor/linalg_decomp.py),
so their gradients are those."""

from __future__ import annotations

from collections import namedtuple

from . import linalg_decomp as la
from .creation import zeros
from .elementwise import _to_tensor

METHODS: dict = {}
FUNCTIONS: dict = {}

SvdResult = namedtuple("SvdResult", ["U", "S", "V"])
TriangularSolveResult = namedtuple("TriangularSolveResult", ["solution", "cloned_coefficient"])


def _both(fn):
    """Register fn as torch.<name>(input, ...) and Tensor.<name>(...)."""
    METHODS[fn.__name__] = fn
    FUNCTIONS[fn.__name__] = fn
    return fn


@_both
def svd(input, some: bool = True, compute_uv: bool = True, *, out=None) -> SvdResult:
    """(U, S, V) with input = U diag(S) V^T (V, not linalg.svd's Vh); some=False: the full U
    (..., m, m) and V (..., n, n); compute_uv=False: U and V zero-filled at those full shapes."""
    input = _to_tensor(input)
    if not compute_uv:
        S = la.svdvals(input)
        m, n = input.shape[-2], input.shape[-1]
        batch = input.shape[:-2]
        return SvdResult(zeros(*batch, m, m, dtype=input.dtype), S, zeros(*batch, n, n, dtype=input.dtype))
    U, S, Vh = la.svd(input, full_matrices=not some)
    return SvdResult(U, S, Vh.mT)


@_both
def qr(input, some: bool = True, *, out=None) -> la.QRResult:
    """(Q, R): linalg.qr with mode 'reduced' (some=True) or 'complete'."""
    return la.qr(input, mode="reduced" if some else "complete")


@_both
def cholesky(input, upper: bool = False, *, out=None):
    """The Cholesky factor, lower (or upper) triangular: linalg.cholesky."""
    return la.cholesky(input, upper=upper)


@_both
def pinverse(input, rcond: float = 1e-15):
    """The pseudo-inverse, singular values below rcond * the largest taken as zero."""
    return la.pinv(input, rtol=rcond)


@_both
def cholesky_solve(input, input2, upper: bool = False, *, out=None):
    """X with (L L^T) X = input, L = input2 the Cholesky factor (U^T U with upper=True)."""
    return la.cholesky_solve(input, input2, upper)


@_both
def cholesky_inverse(input, upper: bool = False, *, out=None):
    """(L L^T)^-1 from the Cholesky factor L = input (U^T U with upper=True)."""
    return la.cholesky_inverse(input, upper)


@_both
def triangular_solve(input, A, upper: bool = True, transpose: bool = False, unitriangular: bool = False, *,
                     out=None) -> TriangularSolveResult:
    """(X, A's copy) with op(T) X = input, T the upper (or lower) triangle of A, op the
    transpose with transpose=True."""
    A = _to_tensor(A)
    T = A.mT if transpose else A
    X = la.solve_triangular(T, _to_tensor(input), upper=upper != transpose, unitriangular=unitriangular)
    n = A.shape[-1]
    return TriangularSolveResult(X, A.expand(*X.shape[:-2], n, n).clone())  # A at the broadcast batch, as torch
