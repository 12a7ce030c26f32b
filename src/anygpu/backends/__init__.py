"""torch.backends for anygpu: the flags scripts set are accepted; none changes anygpu's maths.

anygpu computes in float32 on WebGPU with its own kernels (no cuDNN, no TF32, no
reduced-precision reductions), so `cudnn.benchmark`, `cudnn.deterministic`,
`cuda.matmul.allow_tf32` and friends are plain attributes that keep what is assigned.
"""

from . import cuda, cudnn, mps

__all__ = ["cuda", "cudnn", "mps", "set_float32_matmul_precision", "get_float32_matmul_precision"]

_matmul_precision = ["highest"]


def set_float32_matmul_precision(precision: str) -> None:
    """torch.set_float32_matmul_precision: "highest", "high" or "medium" are accepted and kept;
    anygpu's float32 matmuls compute in full float32 whatever is set."""
    if precision not in ("highest", "high", "medium"):
        raise ValueError(f"set_float32_matmul_precision: expected 'highest', 'high' or 'medium', got {precision!r}")
    _matmul_precision[0] = precision


def get_float32_matmul_precision() -> str:
    return _matmul_precision[0]
