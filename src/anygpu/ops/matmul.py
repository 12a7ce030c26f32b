"""Matrix products (Layer 0): matmul, batch_matmul and the strided form autograd uses."""

from __future__ import annotations

import struct

from ..runtime import LimitError, load_shader
from ._common import check_buffer, check_positive

_TILE = 64


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def matmul_strided(dev, a, b, batch: int, m: int, n: int, k: int,
                   trans_a: bool = False, trans_b: bool = False,
                   a_batch: bool = True, b_batch: bool = True, alpha: float = 1.0, op: str = "matmul"):
    """C[z] = alpha * op(A[z]) @ op(B[z]) for z < batch, C row-major [batch, m, n].

    A is stored [m, k] row-major ([k, m] if trans_a); B [k, n] ([n, k] if trans_b).
    a_batch/b_batch False broadcast one matrix over the batch (stride 0)."""
    check_positive(op, batch=batch, m=m, n=n, k=k)
    a_rows, a_cols = (k, m) if trans_a else (m, k)
    b_rows, b_cols = (n, k) if trans_b else (k, n)
    check_buffer(op, "a", a, (batch if a_batch else 1) * m * k,
                 f"{'batch*' if a_batch and batch > 1 else ''}{a_rows}*{a_cols}")
    check_buffer(op, "b", b, (batch if b_batch else 1) * k * n,
                 f"{'batch*' if b_batch and batch > 1 else ''}{b_rows}*{b_cols}")
    if batch > 65535:
        raise LimitError(f"{op}: batch of {batch} is over the adapter's max-compute-workgroups-per-dimension (65535)")
    a_rs, a_cs = (1, m) if trans_a else (k, 1)
    b_rs, b_cs = (1, k) if trans_b else (n, 1)
    out = dev.empty(batch * m * n)
    kernel = dev.kernel("matmul_tiled", load_shader("matmul_tiled.wgsl"), 2, 1, "I" * 12)
    params = (m, n, k, batch, a_rs, a_cs, b_rs, b_cs,
              m * k if a_batch else 0, k * n if b_batch else 0, m * n, _f32_bits(alpha))
    dev.launch(kernel, [a, b], [out], params, (-(-n // _TILE), -(-m // _TILE), batch))
    return out


def matmul(dev, a, b, m: int, n: int, k: int):
    """C = A @ B with A [m, k] and B [k, n] row-major; returns C [m, n]."""
    return matmul_strided(dev, a, b, 1, m, n, k, op="matmul")


def batch_matmul(dev, a, b, batch: int, m: int, n: int, k: int):
    """C[i] = A[i] @ B[i] for i < batch; A [batch, m, k], B [batch, k, n] -> C [batch, m, n]."""
    return matmul_strided(dev, a, b, batch, m, n, k, op="batch_matmul")
