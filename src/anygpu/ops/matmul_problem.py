"""The description of one matrix product that every matmul kernel family takes (the
register-blocked family of matmul_gen.py, the subgroup-matrix family of sgmat.py), and the
packing of its uniform block (kernels/lib/matmul_params.wgsl). No imports of the GPU here:
benchmarks load it on machines where only the kernels' text is wanted."""

from __future__ import annotations

import struct
from typing import NamedTuple


class Problem(NamedTuple):
    """One strided, batched product: C[z] = alpha * op(A[z]) @ op(B[z]) for z < batch,
    C row-major [batch, m, n]; A stored [m, k] ([k, m] if trans_a), B [k, n]
    ([n, k] if trans_b); a_batch/b_batch False broadcast one matrix over the batch."""

    batch: int
    m: int
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False
    a_batch: bool = True
    b_batch: bool = True
    alpha: float = 1.0

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.n * self.k

    @property
    def a_len(self) -> int:
        return (self.batch if self.a_batch else 1) * self.m * self.k

    @property
    def b_len(self) -> int:
        return (self.batch if self.b_batch else 1) * self.k * self.n

    def params(self) -> tuple:
        """The kernels' uniform block (kernels/lib/matmul_params.wgsl)."""
        m, n, k = self.m, self.n, self.k
        a_rs, a_cs = (1, m) if self.trans_a else (k, 1)
        b_rs, b_cs = (1, k) if self.trans_b else (n, 1)
        alpha_bits = struct.unpack("<I", struct.pack("<f", self.alpha))[0]
        return (m, n, k, self.batch, a_rs, a_cs, b_rs, b_cs,
                m * k if self.a_batch else 0, k * n if self.b_batch else 0, m * n, alpha_bits)


PARAM_FORMAT = "I" * 12
