"""Random f16 operands of a matmul Problem and their float64 product (the matrix-kernel
tests: test_sgmat.py on matrix units, test_sgmat_emulated.py on emulated kernels)."""

from __future__ import annotations

import numpy as np


def operands(p, with_bias: bool, seed: int):
    """(a, b, bias or None) in float16 as stored (transposed where p says), and the float64
    alpha * op(A) @ op(B) + bias, [batch, m, n]."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, ((p.batch if p.a_batch else 1), *((p.k, p.m) if p.trans_a else (p.m, p.k))))
    b = rng.uniform(-1, 1, ((p.batch if p.b_batch else 1), *((p.n, p.k) if p.trans_b else (p.k, p.n))))
    a, b = a.astype(np.float16), b.astype(np.float16)
    bias = rng.uniform(-1, 1, p.n).astype(np.float16) if with_bias else None
    A = a.astype(np.float64).transpose(0, 2, 1) if p.trans_a else a.astype(np.float64)
    B = b.astype(np.float64).transpose(0, 2, 1) if p.trans_b else b.astype(np.float64)
    want = p.alpha * (A @ B) + (0 if bias is None else bias.astype(np.float64))
    return a, b, bias, np.broadcast_to(want, (p.batch, p.m, p.n))
