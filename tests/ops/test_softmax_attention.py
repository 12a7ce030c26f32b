"""softmax, its backward, and scaled dot-product attention against torch."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F


@pytest.mark.parametrize("rows, cols", [(5, 7), (3, 300), (2, 1), (40, 64)])
def test_softmax_and_backward(dev, rng, upload, read, close, vjp, rows, cols):
    x = (rng.standard_normal((rows, cols)) * 3).astype(np.float32)
    grad = rng.standard_normal((rows, cols)).astype(np.float32)
    expected, (expected_grad,) = vjp(lambda t: torch.softmax(t, dim=1), [x], grad)
    y = dev.softmax(upload(x), rows, cols)
    close(read(y, x.shape), expected)
    close(read(dev.softmax_backward(upload(grad), y, rows, cols), x.shape), expected_grad)


def test_softmax_rows_of_huge_magnitude(dev, upload, read):
    x = np.array([[1e30, -1e30, 0.0, 1e30],
                  [-1e30, -1e30, -1e30, -1e30],
                  [3e38, -3e38, 1.0, 2.0],
                  [-1e30, 5.0, 5.0, -1e30]], dtype=np.float32)
    y = read(dev.softmax(upload(x), 4, 4), (4, 4))
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y, torch.softmax(torch.tensor(x, dtype=torch.float64), dim=1).numpy(), atol=1e-7)


def test_softmax_many_rows_fold_the_grid(dev, rng, upload, read, close):
    rows, cols = 70_000, 3
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    expected = torch.softmax(torch.tensor(x, dtype=torch.float64), dim=1).numpy()
    close(read(dev.softmax(upload(x), rows, cols), x.shape), expected)


@pytest.mark.parametrize("batch_heads, seq_len, d_k", [(3, 17, 8), (2, 70, 33)])
def test_attention_and_backward_match_torch(dev, rng, upload, read, close, vjp, batch_heads, seq_len, d_k):
    shape = (batch_heads, seq_len, d_k)
    q, k, v, grad = (rng.standard_normal(shape).astype(np.float32) for _ in range(4))
    expected, (gq, gk, gv) = vjp(F.scaled_dot_product_attention, [q, k, v], grad)
    q_buf, k_buf, v_buf = upload(q), upload(k), upload(v)
    out = dev.scaled_dot_product_attention(q_buf, k_buf, v_buf, batch_heads, seq_len, d_k)
    close(read(out, shape), expected, atol=1e-4)
    probs = dev.attention_probs(q_buf, k_buf, batch_heads, seq_len, d_k)
    scores = torch.tensor(q, dtype=torch.float64) @ torch.tensor(k, dtype=torch.float64).transpose(1, 2)
    close(read(probs, (batch_heads, seq_len, seq_len)), torch.softmax(scores / np.sqrt(d_k), dim=-1).numpy())
    for saved in (None, probs):
        dq, dk, dv = dev.attention_backward(upload(grad), q_buf, k_buf, v_buf, batch_heads, seq_len, d_k,
                                            probs=saved)
        close(read(dq, shape), gq, atol=1e-4)
        close(read(dk, shape), gk, atol=1e-4)
        close(read(dv, shape), gv, atol=1e-4)
