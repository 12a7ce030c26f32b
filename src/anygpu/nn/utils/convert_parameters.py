"""torch.nn.utils' parameters_to_vector and vector_to_parameters."""

from __future__ import annotations

from ...tensor import Tensor, cat

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters) -> Tensor:
    """All parameters flattened and joined into one 1-D tensor, in order (differentiable)."""
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    if not params:
        raise ValueError("parameters_to_vector: expected at least one parameter")
    return cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec: Tensor, parameters) -> None:
    """Copy consecutive pieces of the 1-D `vec` into the parameters, in place (GPU to GPU)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"vector_to_parameters: expected vec to be an anygpu Tensor, got {type(vec).__name__}")
    if vec.ndim != 1:
        raise ValueError(f"vector_to_parameters: vec must be 1-D, got shape {vec.shape}")
    params = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    total = sum(p.numel() for p in params)
    if total != vec.numel():
        raise ValueError(f"vector_to_parameters: vec has {vec.numel()} elements, the parameters hold {total}")
    offset = 0
    for p in params:
        if p.dtype != vec.dtype:
            raise ValueError(f"vector_to_parameters: vec is {vec.dtype}, a parameter is {p.dtype}")
        p._dev.copy(vec._buf, p._buf, n=p.numel(), src_offset=offset)
        p._host = None
        offset += p.numel()
