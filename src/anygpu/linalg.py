"""torch.linalg: vector_norm, matrix_norm, norm, det, slogdet, logdet, solve, inv (defined in
`anygpu/tensor/linalg.py`, part of the tensor layer: Tensor.det and Tensor.norm use them: LU in
Tensor ops), and the decompositions and what builds on them -- cholesky, qr, eigh, svd, pinv,
lstsq, matrix_rank, cond, solve_triangular, ... (`anygpu/tensor/linalg_decomp.py`: factorized
on the host with numpy's LAPACK in float64, differentiated by torch's formulas in Tensor ops).
Failures of a factorization raise LinAlgError (a RuntimeError), as torch's."""

from .tensor.linalg import SlogdetResult, det, inv, logdet, matrix_norm, norm, slogdet, solve, vector_norm
from .tensor.linalg_decomp import (
    CholeskyExResult, EighResult, InvExResult, LinAlgError, LstsqResult, QRResult, SolveExResult, SVDResult,
    cholesky, cholesky_ex, cond, cross, diagonal, eigh, eigvalsh, inv_ex, lstsq, matmul, matrix_power, matrix_rank,
    multi_dot, pinv, qr, solve_ex, solve_triangular, svd, svdvals, vander, vecdot,
)

__all__ = ["vector_norm", "matrix_norm", "norm", "det", "slogdet", "solve", "inv", "logdet", "SlogdetResult",
           "LinAlgError", "cholesky", "cholesky_ex", "qr", "eigh", "eigvalsh", "svd", "svdvals", "pinv", "lstsq",
           "matrix_rank", "cond", "solve_triangular", "inv_ex", "solve_ex", "multi_dot", "matmul", "cross",
           "diagonal", "vecdot", "vander", "matrix_power", "CholeskyExResult", "QRResult", "EighResult",
           "SVDResult", "LstsqResult", "InvExResult", "SolveExResult"]
