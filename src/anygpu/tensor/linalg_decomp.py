"""torch.linalg's decompositions and what is built on them: cholesky, qr, eigh, svd, pinv,
lstsq, matrix_rank, cond, solve_triangular, inv_ex, solve_ex, cholesky_solve,
cholesky_inverse; and the small ones (multi_dot, matmul, cross, diagonal, vecdot, vander,
matrix_power).

The factorizations run on the host with numpy's LAPACK in float64, batched over the leading
dims (the input is read back, as `unique` reads back; a float64 tensor lives on the host
anyway), and come back in the input's dtype. Each differentiable output is recorded as one
node (`_record`) whose backward is torch's formula (FunctionsManual.cpp) written in Tensor
ops, so the gradient runs where the tensors live and composes with autograd; the node of
one output sees only that output's gradient (the formulas are linear in the output
gradients, so the sum over the outputs' nodes is torch's gradient)."""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np

from ..dtypes import int32, int64
from ..ops.nd import broadcast_shapes
from .core import Tensor
from .creation import tensor, zeros
from .elementwise import _to_tensor
from .function import Function
from .linalg import LinAlgError  # (defined beside inv and solve, which raise it too)
from .grad_mode import is_grad_enabled
from .shape import cat, stack

__all__ = ["LinAlgError", "cholesky", "cholesky_ex", "qr", "eigh", "eigvalsh", "svd", "svdvals", "pinv", "lstsq",
           "matrix_rank", "cond", "solve_triangular", "inv_ex", "solve_ex", "cholesky_solve", "cholesky_inverse",
           "multi_dot", "matmul", "cross", "diagonal", "vecdot", "vander", "matrix_power"]


CholeskyExResult = namedtuple("CholeskyExResult", ["L", "info"])
QRResult = namedtuple("QRResult", ["Q", "R"])
EighResult = namedtuple("EighResult", ["eigenvalues", "eigenvectors"])
SVDResult = namedtuple("SVDResult", ["U", "S", "Vh"])
LstsqResult = namedtuple("LstsqResult", ["solution", "residuals", "rank", "singular_values"])
InvExResult = namedtuple("InvExResult", ["inverse", "info"])
SolveExResult = namedtuple("SolveExResult", ["result", "info"])


# ---------------------------------------------------------------------------- host and recording


def _matrices(op: str, A, square: bool = False) -> Tensor:
    """A as a float tensor of matrices (..., m, n), with torch's errors for fewer dims, a
    non-square matrix where one is needed, or an integer dtype."""
    A = _to_tensor(A)
    if A.ndim < 2:
        raise RuntimeError(f"{op}: The input tensor A must have at least 2 dimensions.")
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{op}: A must be batches of square matrices, but they are {A.shape[-2]} by "
                           f"{A.shape[-1]} matrices")
    if not A.dtype.is_floating_point:
        name = {"int64": "Long", "int32": "Int", "bool": "Bool"}.get(A.dtype.name, A.dtype.name)
        raise RuntimeError(f"{op}: Expected a floating point or complex tensor as input. Got {name}")
    return A


def _host(A: Tensor) -> np.ndarray:
    return np.asarray(A.numpy(), dtype=np.float64)


def _back(arr, like: Tensor) -> Tensor:
    """A host result as a tensor of like's dtype."""
    return tensor(np.asarray(arr), dtype=like.dtype)


def _wants_grad(*inputs: Tensor) -> bool:
    return is_grad_enabled() and any(isinstance(t, Tensor) and t.requires_grad for t in inputs)


class _HostOp(Function):
    """One output computed on the host, recorded with a backward rule: apply(*inputs, (out,),
    rule) returns out; rule(grad_out) -> one gradient (or None) per input."""

    @staticmethod
    def forward(ctx, *args):
        ctx.rule = args[-1]
        return args[-2][0]

    @staticmethod
    def backward(ctx, grad):
        return (*ctx.rule(grad), None, None)


_NODES: dict = {}


def _record(name: str, inputs: tuple, out: Tensor, rule) -> Tensor:
    """out, recorded as a node named `name` + "Backward" over `inputs` when one needs a gradient."""
    if not _wants_grad(*inputs):
        return out
    node = _NODES.get(name)
    if node is None:
        node = _NODES[name] = type(name, (_HostOp,), {"__doc__": f"The backward node of {name}."})
    return node.apply(*inputs, (out,), rule)


def _eye(n: int, like: Tensor) -> Tensor:
    return tensor(np.eye(n), dtype=like.dtype)


def _sym(X: Tensor) -> Tensor:
    return (X + X.mT) * 0.5


_NOT_CONVERGED = {
    "linalg.svd": "linalg.svd: The algorithm failed to converge because the input matrix contained non-finite values.",
    "linalg.eigh": "linalg.eigh: The algorithm failed to converge because the input matrix is ill-conditioned or has "
                   "too many repeated eigenvalues.",
}


def _lapack(op: str, fn, *args, **kwargs):
    """fn(*args) of numpy.linalg, its LinAlgError (no convergence, non-finite input) as torch's."""
    try:
        return fn(*args, **kwargs)
    except np.linalg.LinAlgError:
        raise LinAlgError(_NOT_CONVERGED[op]) from None


def _host_inv(M: np.ndarray) -> np.ndarray:
    """Inverses for a backward rule: NaN where a matrix is singular (its gradient is undefined)."""
    try:
        return np.linalg.inv(M)
    except np.linalg.LinAlgError:
        return np.full_like(M, math.nan)


# ---------------------------------------------------------------------------- cholesky


def _cholesky_host(op: str, A: Tensor):
    """(L on the host, info): info the order of the first leading minor that is not
    positive-definite in the first failing matrix (0 when all factor), as LAPACK's potrf."""
    a = _host(A)
    lower = np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2)  # torch reads the lower triangle
    try:
        return np.linalg.cholesky(lower), np.zeros(a.shape[:-2], np.int64)
    except np.linalg.LinAlgError:
        pass
    flat = lower.reshape(-1, *a.shape[-2:])
    L, info = np.zeros_like(flat), np.zeros(len(flat), np.int64)
    for b, m in enumerate(flat):
        try:
            L[b] = np.linalg.cholesky(m)
        except np.linalg.LinAlgError:
            order = next(k for k in range(1, len(m) + 1) if not _pd(m[:k, :k]))
            info[b] = order
            L[b] = np.tril(m)
    return L.reshape(a.shape), info.reshape(a.shape[:-2])


def _pd(m: np.ndarray) -> bool:
    try:
        np.linalg.cholesky(m)
        return True
    except np.linalg.LinAlgError:
        return False


def _cholesky_rule(A: Tensor, L: Tensor, upper: bool):
    """torch's cholesky_backward: gA = sym(L^-H Φ(L^H gL) L^-1), Φ the lower triangle with the
    diagonal halved."""
    L_inv = _back(_host_inv(_host(L)), L)

    def rule(grad):
        gL = grad.mT if upper else grad
        n = L.shape[-1]
        X = L.mT @ gL
        phi = X.tril(-1) + X * _eye(n, X) * 0.5
        return (_sym(L_inv.mT @ phi @ L_inv),)
    return rule


def cholesky_ex(A, *, upper: bool = False, check_errors: bool = False, out=None) -> CholeskyExResult:
    """(L, info): the Cholesky factor of symmetric positive-definite matrices (..., n, n) from
    their lower triangle (U = L^T with upper=True); info (int32) the order of the leading
    minor that is not positive-definite, 0 where the factorization completed."""
    A = _matrices("linalg.cholesky", A, square=True)
    L_host, info = _cholesky_host("linalg.cholesky", A)
    if check_errors and info.any():
        _cholesky_error(info)
    L = _back(L_host, A)
    L = _record("LinalgCholeskyEx", (A,), L, _cholesky_rule(A, L, False)) if _wants_grad(A) else L
    return CholeskyExResult(L.mT if upper else L, tensor(info, dtype=int32))


def _cholesky_error(info: np.ndarray) -> None:
    flat = info.reshape(-1)
    bad = int(np.flatnonzero(flat)[0])
    where_ = f"(Batch element {bad}): " if info.ndim else ""
    raise LinAlgError(f"linalg.cholesky: {where_}The factorization could not be completed because the input is not "
                      f"positive-definite (the leading minor of order {int(flat[bad])} is not positive-definite).")


def cholesky(A, *, upper: bool = False, out=None) -> Tensor:
    """The Cholesky factor L (A = L L^T) of symmetric positive-definite matrices (..., n, n),
    read from their lower triangle; U = L^T with upper=True. LinAlgError when one is not
    positive-definite."""
    A = _matrices("linalg.cholesky", A, square=True)
    L_host, info = _cholesky_host("linalg.cholesky", A)
    if info.any():
        _cholesky_error(info)
    L = _back(L_host, A)
    if _wants_grad(A):
        L = _record("LinalgCholesky", (A,), L, _cholesky_rule(A, L, False))
    return L.mT if upper else L


# ---------------------------------------------------------------------------- qr


def _qr_square_rule(gQ, gR, Q: Tensor, R: Tensor, R_inv: Tensor) -> Tensor:
    """m >= n, reduced: gA = (gQ + Q copyltu(M)) R^-T, M = R gR^T - gQ^T Q."""
    M = None
    if gR is not None:
        M = R @ gR.mT
    if gQ is not None:
        M = -(gQ.mT @ Q) if M is None else M - gQ.mT @ Q
    assert M is not None
    inner = Q @ (M.tril() + M.tril(-1).mT)
    if gQ is not None:
        inner = inner + gQ
    return inner @ R_inv.mT


def _qr_rule(A: Tensor, Q: Tensor, R: Tensor, mode: str, which: str):
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    R_inv = _back(_host_inv(_host(R[..., :k, :k])), R)

    def rule(grad):
        if mode == "r":
            raise RuntimeError("The derivative of linalg.qr depends on Q, which is not computed when mode='r'. "
                               "Please use linalg.qr(A, mode='reduced') if you are going to differentiate through "
                               "linalg.qr.")
        if mode == "complete" and m > n:
            raise RuntimeError("The QR decomposition is not differentiable when mode='complete' and nrows > ncols.")
        gQ, gR = (grad, None) if which == "Q" else (None, grad)
        if m >= n:
            return (_qr_square_rule(gQ, gR, Q, R, R_inv),)
        # wide: A = [X | Y], X = Q U, Y = Q V; the gradient of V moves to Q and Y
        Y = A[..., m:]
        gU = gR[..., :m] if gR is not None else None
        gV = gR[..., m:] if gR is not None else None
        gQ_all = gQ if gV is None else (Y @ gV.mT if gQ is None else gQ + Y @ gV.mT)
        gX = _qr_square_rule(gQ_all, gU, Q, R[..., :m], R_inv)
        gY = Q @ gV if gV is not None else zeros(*A.shape[:-1], n - m, dtype=gX.dtype)
        return (cat([gX, gY], -1),)
    return rule


def qr(A, mode: str = "reduced", *, out=None) -> QRResult:
    """(Q, R) with A = Q R, Q with orthonormal columns, R upper triangular; mode 'reduced'
    (Q (..., m, k), R (..., k, n), k = min(m, n)), 'complete' (Q (..., m, m)) or 'r' (Q empty)."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           f"or 'complete'")
    A = _matrices("linalg.qr", A)
    a = _host(A)
    q, r = np.linalg.qr(a, mode="complete" if mode == "complete" else "reduced")
    Q, R = _back(q, A), _back(r, A)
    if _wants_grad(A):
        if mode != "r":
            Q = _record("LinalgQr", (A,), Q, _qr_rule(A, Q, R, mode, "Q"))
        R = _record("LinalgQr", (A,), R, _qr_rule(A, Q.detach(), R, mode, "R"))
    if mode == "r":
        Q = _back(np.zeros((0,)), A)
    return QRResult(Q, R)


# ---------------------------------------------------------------------------- eigh


def _check_uplo(UPLO: str) -> None:
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")


def _eigh_host(op: str, A, UPLO: str):
    _check_uplo(UPLO)
    A = _matrices(op, A, square=True)
    w, v = _lapack("linalg.eigh", np.linalg.eigh, _host(A), UPLO="L" if UPLO == "L" else "U")
    return A, w, v


def _eigh_rule(L: Tensor, V: Tensor, which: str):
    """torch's linalg_eig_backward for Hermitian input: gA = V (diag(gL) + (V^T gV) / E) V^T,
    E_ij = L_j - L_i off the diagonal (zero on it)."""
    def rule(grad):
        if which == "L":
            return ((V * grad.unsqueeze(-2)) @ V.mT,)
        n = L.shape[-1]
        eye_n = _eye(n, L)
        E = L.unsqueeze(-2) - L.unsqueeze(-1) + eye_n
        inner = (V.mT @ grad) / E * (1 - eye_n)
        return (V @ inner @ V.mT,)
    return rule


def eigh(A, UPLO: str = "L", *, out=None) -> EighResult:
    """(eigenvalues ascending (..., n), eigenvectors (..., n, n) as columns) of symmetric
    matrices, read from the triangle UPLO ('L' or 'U')."""
    A, w, v = _eigh_host("linalg.eigh", A, UPLO)
    L, V = _back(w, A), _back(v, A)
    if _wants_grad(A):
        L_plain, V_plain = L, V
        L = _record("LinalgEigh", (A,), L_plain, _eigh_rule(L_plain, V_plain, "L"))
        V = _record("LinalgEigh", (A,), V_plain, _eigh_rule(L_plain, V_plain, "V"))
    return EighResult(L, V)


def eigvalsh(A, UPLO: str = "L", *, out=None) -> Tensor:
    """The eigenvalues (ascending, (..., n)) of symmetric matrices, read from the triangle UPLO."""
    A, w, v = _eigh_host("linalg.eigvalsh", A, UPLO)
    L = _back(w, A)
    if _wants_grad(A):
        L = _record("LinalgEigh", (A,), L, _eigh_rule(L, _back(v, A), "L"))
    return L


# ---------------------------------------------------------------------------- svd


def _svd_rule(U: Tensor, S: Tensor, Vh: Tensor, which: str):
    """torch's svd_backward (reduced U (..., m, k), Vh (..., k, n)):
    gA = U [(skew(U^T gU) / E) S + S (skew(V^T gV) / E) + diag(gS)] V^T
         + (I - U U^T) gU S^-1 V^T + U S^-1 gV^T (I - V V^T),  E_ij = S_j^2 - S_i^2."""
    def rule(grad):
        if which == "S":
            return (U @ (grad.unsqueeze(-1) * Vh),)
        m, n, k = U.shape[-2], Vh.shape[-1], S.shape[-1]
        S2 = S * S
        eye_k = _eye(k, S)
        E = S2.unsqueeze(-2) - S2.unsqueeze(-1) + eye_k
        if which == "U":
            UhgU = U.mT @ grad
            gA = U @ (((UhgU - UhgU.mT) / E) * S.unsqueeze(-2)) @ Vh
            if m > k:
                gA = gA + ((grad - U @ UhgU) / S.unsqueeze(-2)) @ Vh
            return (gA,)
        V, gV = Vh.mT, grad.mT
        VhgV = V.mT @ gV
        gA = U @ (S.unsqueeze(-1) * ((VhgV - VhgV.mT) / E)) @ Vh
        if n > k:
            gA = gA + U @ ((gV - V @ VhgV).mT / S.unsqueeze(-1))
        return (gA,)
    return rule


def svd(A, full_matrices: bool = True, *, driver=None, out=None) -> SVDResult:
    """(U, S, Vh) with A = U diag(S) Vh, S descending (..., k), k = min(m, n); U (..., m, m) and
    Vh (..., n, n) with full_matrices, else (..., m, k) and (..., k, n). The gradient of U and
    Vh (torch's: the first k columns with full_matrices) needs distinct singular values."""
    A = _matrices("linalg.svd", A)
    u, s, vh = _lapack("linalg.svd", np.linalg.svd, _host(A), full_matrices=full_matrices)
    U, S, Vh = _back(u, A), _back(s, A), _back(vh, A)
    if _wants_grad(A):
        k = S.shape[-1]
        Uk, Vhk = U[..., :k], Vh[..., :k, :]
        Ur = _record("LinalgSvd", (A,), U if not full_matrices else Uk, _svd_rule(Uk, S, Vhk, "U"))
        Vhr = _record("LinalgSvd", (A,), Vh if not full_matrices else Vhk, _svd_rule(Uk, S, Vhk, "Vh"))
        if full_matrices:  # the columns past k carry no gradient (torch narrows them away)
            Ur = cat([Ur, U[..., k:]], -1) if U.shape[-1] > k else Ur
            Vhr = cat([Vhr, Vh[..., k:, :]], -2) if Vh.shape[-2] > k else Vhr
        S = _record("LinalgSvd", (A,), S, _svd_rule(Uk, S, Vhk, "S"))
        U, Vh = Ur, Vhr
    return SVDResult(U, S, Vh)


def svdvals(A, *, driver=None, out=None) -> Tensor:
    """The singular values of A (..., m, n), descending (..., min(m, n))."""
    A = _matrices("linalg.svdvals", A)
    if not _wants_grad(A):
        return _back(_lapack("linalg.svd", np.linalg.svd, _host(A), compute_uv=False), A)
    return svd(A, full_matrices=False).S


# ---------------------------------------------------------------------------- pinv, rank, lstsq, cond


def _tolerances(op: str, A: Tensor, s_max: np.ndarray, atol, rtol, tol=None) -> np.ndarray:
    """torch's cut-off: max(atol, rtol * largest singular value); rtol defaults to eps * max(m, n)
    when neither is given, to 0 when only atol is."""
    if tol is not None:
        atol, rtol = tol, 0.0
    def value(t):
        return np.asarray(t.numpy() if isinstance(t, Tensor) else t, dtype=np.float64)
    if rtol is None:
        rtol = np.finfo(A.dtype.host or np.float32).eps \
            * max(A.shape[-2], A.shape[-1]) if atol is None else 0.0
    atol = 0.0 if atol is None else atol
    return np.maximum(value(atol), value(rtol) * s_max)


def _pinv_rule(A: Tensor, P: Tensor):
    """torch's pinv_backward."""
    def rule(grad):
        m, n = A.shape[-2], A.shape[-1]
        Ph, gh = P.mT, grad.mT
        if m <= n:
            K = gh @ P
            KPh = K @ Ph
            return (-(P @ K).mT + KPh - (A @ P) @ KPh + (Ph @ P) @ (gh - K @ A),)
        K = P @ gh
        PhK = Ph @ K
        return (-(K @ P).mT + (gh - A @ K) @ P @ Ph + PhK - PhK @ P @ A,)
    return rule


def pinv(A, *, atol=None, rtol=None, hermitian: bool = False, out=None) -> Tensor:
    """The pseudo-inverse (..., n, m) of A (..., m, n) from its SVD (eigh when hermitian),
    singular values below max(atol, rtol * largest) taken as zero."""
    A = _to_tensor(A)
    if A.ndim < 2 or not A.dtype.is_floating_point:
        raise RuntimeError(f"linalg.pinv({A.dtype}{list(A.shape)}): expected a tensor with 2 or more dimensions of "
                           f"float, double, cfloat or cdouble types")
    a = _host(A)
    if hermitian:
        w, v = _lapack("linalg.eigh", np.linalg.eigh, a)
        cut = _tolerances("linalg.pinv", A, np.abs(w).max(-1, initial=0.0), atol, rtol)
        keep = np.abs(w) > cut[..., None]
        inv_w = np.where(keep, 1.0 / np.where(keep, w, 1.0), 0.0)
        p = (v * inv_w[..., None, :]) @ np.swapaxes(v, -1, -2)
    else:
        u, s, vh = _lapack("linalg.svd", np.linalg.svd, a, full_matrices=False)
        cut = _tolerances("linalg.pinv", A, s.max(-1, initial=0.0), atol, rtol)
        keep = s > cut[..., None]
        inv_s = np.where(keep, 1.0 / np.where(keep, s, 1.0), 0.0)
        p = np.swapaxes(vh, -1, -2) @ (inv_s[..., :, None] * np.swapaxes(u, -1, -2))
    P = _back(p, A)
    return _record("LinalgPinv", (A,), P, _pinv_rule(A, P)) if _wants_grad(A) else P


def matrix_rank(A, *, atol=None, rtol=None, hermitian: bool = False, tol=None, out=None) -> Tensor:
    """The number of singular values (|eigenvalues| when hermitian) above max(atol, rtol *
    largest), int64 (...)."""
    A = _to_tensor(A)
    if A.ndim < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at least 2 dimensions.")
    a = _host(A)
    s = np.abs(_lapack("linalg.eigh", np.linalg.eigvalsh, a)) if hermitian \
        else _lapack("linalg.svd", np.linalg.svd, a, compute_uv=False)
    cut = _tolerances("linalg.matrix_rank", A, s.max(-1, initial=0.0), atol, rtol, tol)
    return tensor((s > cut[..., None]).sum(-1).astype(np.int64), dtype=int64)


def lstsq(A, B, rcond=None, *, driver=None) -> LstsqResult:
    """(solution, residuals, rank, singular_values) of min ||A X - B|| as torch's default CPU
    driver 'gelsy' answers: solution (..., n, k) (minimum norm, as LAPACK's), residuals and
    singular_values empty, rank int64 (...). Its gradient is torch's: that of pinv(A) @ B."""
    A, B = _matrices("linalg.lstsq", A), _to_tensor(B)
    vector = B.ndim == A.ndim - 1
    if vector:
        B = B.unsqueeze(-1)
    if B.ndim < 2 or B.shape[-2] != A.shape[-2]:
        raise RuntimeError(f"torch.linalg.lstsq: input.size(-2) should match other.size(-2). Got "
                           f"{A.shape[-2]} and {B.shape[-2] if B.ndim >= 2 else B.shape}")
    m, n, k = A.shape[-2], A.shape[-1], B.shape[-1]
    batch = broadcast_shapes("linalg.lstsq", A.shape[:-2], B.shape[:-2])
    a = np.broadcast_to(_host(A), (*batch, m, n)).reshape(-1, m, n)
    b = np.broadcast_to(_host(B), (*batch, m, k)).reshape(-1, m, k)
    eps = np.finfo(A.dtype.host or np.float32).eps
    cond = rcond if rcond is not None else eps * max(m, n)
    solved = [np.linalg.lstsq(a[i], b[i], rcond=cond) for i in range(len(a))]
    x = np.stack([s[0] for s in solved]).reshape(*batch, n, k) if solved else np.zeros((*batch, n, k))
    ranks = np.array([s[2] for s in solved], np.int64).reshape(batch)
    X = _back(x, A)
    if _wants_grad(A, B):
        X = pinv(A) @ B  # torch's linalg_lstsq_backward differentiates pinv(A) @ B
    empty = _back(np.zeros((0,)), A)
    return LstsqResult(X.squeeze(-1) if vector else X, empty, tensor(ranks, dtype=int64), empty)


def cond(A, p=None) -> Tensor:
    """The condition number of A in the norm p: None or 2 (largest over smallest singular value),
    -2 (the inverse), 'fro', 'nuc', 1, -1, inf, -inf (norm(A) * norm(inv(A)), square A)."""
    A = _to_tensor(A)
    if A.ndim < 2:
        raise RuntimeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    if p in (None, 2, -2):
        S = svdvals(A)
        return S[..., 0] / S[..., -1] if p != -2 else S[..., -1] / S[..., 0]
    from .linalg import matrix_norm

    A = _matrices("linalg.cond", A, square=True)
    A_inv = inv_ex(A).inverse
    if p == "nuc":
        return svdvals(A).sum(-1) * svdvals(A_inv).sum(-1)
    return matrix_norm(A, p) * matrix_norm(A_inv, p)


# ---------------------------------------------------------------------------- solves and inverses


def _unit_triangle(A: Tensor, upper: bool, unitriangular: bool) -> Tensor:
    """The triangle of A a triangular solve reads (its diagonal ones when unitriangular)."""
    T = A.triu() if upper else A.tril()
    if unitriangular:
        T = T.triu(1) if upper else T.tril(-1)
        T = T + _eye(A.shape[-1], A)
    return T


def solve_triangular(A, B, *, upper: bool, left: bool = True, unitriangular: bool = False, out=None) -> Tensor:
    """X with T X = B (X T = B with left=False), T the upper or lower triangle of A (..., n, n)
    (unit diagonal with unitriangular); batch dims broadcast. The gradient of A lands in T's
    triangle, as torch's."""
    A, B = _matrices("linalg.solve_triangular", A, square=True), _to_tensor(B)
    if B.ndim < 2:
        raise RuntimeError("linalg.solve_triangular: The input tensor B must have at least 2 dimensions.")
    n = A.shape[-1]
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({A.shape[-2]}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    t = _host(_unit_triangle(A, upper, unitriangular))
    t_inv = np.linalg.inv(t)  # a zero on the diagonal: inf/NaN as LAPACK's trtrs leaves them
    b = _host(B)
    x = t_inv @ b if left else b @ t_inv
    X = _back(x, A if A.dtype.itemsize >= B.dtype.itemsize else B)
    if not _wants_grad(A, B):
        return X
    T_inv = _back(t_inv, X)

    def rule(grad):
        gB = T_inv.mT @ grad if left else grad @ T_inv.mT
        gA = None
        if A.requires_grad:
            gA = -(gB @ X.mT) if left else -(X.mT @ gB)
            gA = gA.triu(1 if unitriangular else 0) if upper else gA.tril(-1 if unitriangular else 0)
        return gA, gB if B.requires_grad else None
    return _record("LinalgSolveTriangular", (A, B), X, rule)


def _inverse(op: str, A: Tensor) -> tuple[Tensor, np.ndarray]:
    """(inverses, info): info the 1-based index of a zero pivot (0 for an invertible matrix)."""
    a = _host(A)
    flat = a.reshape(-1, *a.shape[-2:])
    out, info = np.empty_like(flat), np.zeros(len(flat), np.int64)
    for i, m in enumerate(flat):
        try:
            out[i] = np.linalg.inv(m)
            if not np.isfinite(out[i]).all():
                raise np.linalg.LinAlgError
        except np.linalg.LinAlgError:
            out[i] = np.nan
            info[i] = max(1, np.linalg.matrix_rank(m) + 1)
    X = _back(out.reshape(a.shape), A)
    if _wants_grad(A):
        X_plain = X
        X = _record("LinalgInvEx", (A,), X_plain, lambda g: (-(X_plain.mT @ g @ X_plain.mT),))
    return X, info.reshape(a.shape[:-2])


def inv_ex(A, *, check_errors: bool = False, out=None) -> InvExResult:
    """(inverse, info) of square matrices; info (int32) non-zero for a singular matrix (its
    inverse then NaN), a LinAlgError with check_errors."""
    A = _matrices("linalg.inv", A, square=True)
    X, info = _inverse("linalg.inv", A)
    if check_errors and info.any():
        raise LinAlgError(f"linalg.inv: The diagonal element {int(info.reshape(-1)[np.flatnonzero(info)[0]])} is "
                          f"zero, the inversion could not be completed because the input matrix is singular.")
    return InvExResult(X, tensor(info, dtype=int32))


def solve_ex(A, B, *, left: bool = True, check_errors: bool = False, out=None) -> SolveExResult:
    """(X, info) with A X = B (X A = B with left=False), B (..., n, k) or (..., n); info (int32)
    non-zero where A is singular (X then NaN)."""
    A, B = _matrices("linalg.solve", A, square=True), _to_tensor(B)
    n = A.shape[-1]
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    if vector:
        B = B.unsqueeze(-1)
    if (B.shape[-2] if left else B.shape[-1]) != n:
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                           f"{'AX = B' if left else 'XA = B'} ({A.shape[-2]}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    A_inv, info = _inverse("linalg.solve", A)
    if check_errors and info.any():
        raise LinAlgError("torch.linalg.solve: The solver failed because the input matrix is singular.")
    X = A_inv @ B if left else B @ A_inv
    return SolveExResult(X.squeeze(-1) if vector else X, tensor(info, dtype=int32))


def cholesky_solve(B, L, upper: bool = False, *, out=None) -> Tensor:
    """X with (L L^T) X = B (U^T U with upper=True), from the Cholesky factor L (..., n, n) and
    B (..., n, k); the gradient of L is torch's (not restricted to the triangle)."""
    B, L = _to_tensor(B), _to_tensor(L)
    if B.ndim < 2 or L.ndim < 2:
        raise RuntimeError(f"b should have at least 2 dimensions, but has {B.ndim} dimensions instead"
                           if B.ndim < 2 else f"u should have at least 2 dimensions, but has {L.ndim} dimensions "
                           f"instead")
    L = _matrices("cholesky_solve", L, square=True)
    if B.shape[-2] != L.shape[-1]:
        raise RuntimeError(f"Incompatible matrix sizes for cholesky_solve: each A matrix is {L.shape[-1]} by "
                           f"{L.shape[-1]} but each b matrix is {B.shape[-2]} by {B.shape[-1]}")
    t = np.triu(_host(L)) if upper else np.tril(_host(L))
    a = np.swapaxes(t, -1, -2) @ t if upper else t @ np.swapaxes(t, -1, -2)
    a_inv = np.linalg.inv(a)
    X = _back(a_inv @ _host(B), L)
    if not _wants_grad(B, L):
        return X
    A_inv = _back(a_inv, X)

    def rule(grad):
        gB = A_inv @ grad
        gL = None
        if L.requires_grad:
            common = gB @ X.mT
            common = common + common.mT
            gL = -(L @ common) if upper else -(common @ L)
        return gB if B.requires_grad else None, gL
    return _record("CholeskySolve", (B, L), X, rule)


def cholesky_inverse(L, upper: bool = False, *, out=None) -> Tensor:
    """(L L^T)^-1 (U^T U with upper=True) from a Cholesky factor (..., n, n)."""
    L = _to_tensor(L)
    if L.ndim < 2:
        raise RuntimeError("cholesky_inverse: The input tensor input must have at least 2 dimensions.")
    L = _matrices("cholesky_inverse", L, square=True)
    t = np.triu(_host(L)) if upper else np.tril(_host(L))
    a = np.swapaxes(t, -1, -2) @ t if upper else t @ np.swapaxes(t, -1, -2)
    X = _back(np.linalg.inv(a), L)
    if not _wants_grad(L):
        return X

    def rule(grad):
        common = X @ (grad + grad.mT) @ X
        return (-(L @ common) if upper else -(common @ L),)
    return _record("CholeskyInverse", (L,), X, rule)


# ---------------------------------------------------------------------------- the small ones


def multi_dot(tensors, *, out=None) -> Tensor:
    """The product of a chain of matrices (the first may be a row vector, the last a column
    vector, as 1-D tensors), left to right."""
    tensors = [_to_tensor(t) for t in tensors]
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first_vec, last_vec = tensors[0].ndim == 1, tensors[-1].ndim == 1
    chain = list(tensors)
    if first_vec:
        chain[0] = chain[0].unsqueeze(0)
    if last_vec:
        chain[-1] = chain[-1].unsqueeze(-1)
    for i, t in enumerate(chain):
        if t.ndim != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {tensors[i].ndim}D")
    result = chain[0]
    for t in chain[1:]:
        result = result @ t
    if last_vec:
        result = result.squeeze(-1)
    if first_vec:
        result = result.squeeze(0)
    return result


def matmul(input, other, *, out=None) -> Tensor:
    """torch.linalg.matmul: the same as torch.matmul."""
    return _to_tensor(input) @ _to_tensor(other)


def cross(input, other, *, dim: int = -1, out=None) -> Tensor:
    """The cross product along dim (of size 3), batch dims broadcast."""
    input, other = _to_tensor(input), _to_tensor(other)
    if input.shape[dim] != 3 or other.shape[dim] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got {input.shape[dim]} and "
                           f"{other.shape[dim]}")
    return input.cross(other, dim)


def diagonal(A, *, offset: int = 0, dim1: int = -2, dim2: int = -1) -> Tensor:
    """torch.linalg.diagonal: A.diagonal with the matrix dims last by default."""
    return _to_tensor(A).diagonal(offset, dim1, dim2)


def vecdot(x, y, *, dim: int = -1, out=None) -> Tensor:
    """The dot product of x and y along dim, batch dims broadcast (real tensors)."""
    return (_to_tensor(x) * _to_tensor(y)).sum(dim)


def vander(x, *, N=None) -> Tensor:
    """The Vandermonde matrix (..., n, N) of x (..., n): columns x^0, x^1, ..., x^(N-1)."""
    x = _to_tensor(x)
    if x.ndim < 1:
        raise RuntimeError("linalg.vander: x must have at least one dimension.")
    N = x.shape[-1] if N is None else N
    if N < 1:
        raise RuntimeError("N must be greater than 1.")
    columns = [x * 0 + 1]
    for _ in range(N - 1):
        columns.append(columns[-1] * x)
    return stack(columns, -1)


def matrix_power(A, n: int, *, out=None) -> Tensor:
    """A^n for square matrices (n < 0: the inverse's power; a singular A then a LinAlgError)."""
    A = _matrices("linalg.matrix_power", A, square=True)
    if n < 0:
        A = inv_ex(A, check_errors=True).inverse
        n = -n
    return A.matrix_power(n)
