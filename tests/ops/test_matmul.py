"""matmul, batch_matmul and matmul_strided at sizes that are not multiples of the tiles."""

import numpy as np
import pytest


@pytest.mark.parametrize("m, n, k", [(67, 45, 33), (1, 1, 1), (1, 130, 7), (129, 1, 65)])
def test_matmul(dev, rng, upload, read, close, m, n, k):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    close(read(dev.matmul(upload(a), upload(b), m, n, k), (m, n)), a.astype(np.float64) @ b)


def test_batch_matmul(dev, rng, upload, read, close):
    batch, m, n, k = 3, 67, 45, 33
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    close(read(dev.batch_matmul(upload(a), upload(b), batch, m, n, k), (batch, m, n)), a.astype(np.float64) @ b)


@pytest.mark.parametrize("trans_a, trans_b", [(True, False), (False, True), (True, True)])
def test_matmul_strided_transposed_operands(dev, rng, upload, read, close, trans_a, trans_b):
    batch, m, n, k = 2, 19, 23, 17
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, k, n)).astype(np.float32)
    a_stored = a.transpose(0, 2, 1).copy() if trans_a else a
    b_stored = b.transpose(0, 2, 1).copy() if trans_b else b
    out = dev.matmul_strided(upload(a_stored), upload(b_stored), batch, m, n, k,
                             trans_a=trans_a, trans_b=trans_b, alpha=0.5)
    close(read(out, (batch, m, n)), 0.5 * (a.astype(np.float64) @ b))
