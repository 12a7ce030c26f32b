"""torch.linalg: vector_norm, matrix_norm, norm, det, slogdet, logdet, solve, inv (defined in
`anygpu/tensor/linalg.py`, part of the tensor layer: Tensor.det and Tensor.norm use them)."""

from .tensor.linalg import SlogdetResult, det, inv, logdet, matrix_norm, norm, slogdet, solve, vector_norm

__all__ = ["vector_norm", "matrix_norm", "norm", "det", "slogdet", "solve", "inv", "logdet", "SlogdetResult"]
