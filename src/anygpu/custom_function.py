"""torch.autograd.function: `Function`, `FunctionCtx`, `once_differentiable` (defined in
`anygpu/tensor/function.py`, part of the tensor layer)."""

from .tensor.function import Function, FunctionCtx, once_differentiable

__all__ = ["Function", "FunctionCtx", "once_differentiable"]
