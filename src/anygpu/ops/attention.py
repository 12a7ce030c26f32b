"""Scaled dot-product attention (Layer 0), composed of strided matmuls and softmax.

q, k, v and the output are [batch_heads, seq_len, d_k]; the probabilities
P = softmax(q k^T / sqrt(d_k)) are [batch_heads, seq_len, seq_len]. Transposed
operands are read through strides (matmul_strided), never copied."""

from __future__ import annotations

import math

from . import flash_attention
from ._common import check_buffer, check_positive
from .matmul import matmul_strided
from .softmax import softmax, softmax_backward

__all__ = ["attention_probs", "scaled_dot_product_attention", "attention_backward"]


def _check_qkv(op: str, batch_heads: int, seq_len: int, d_k: int, **buffers) -> None:
    check_positive(op, batch_heads=batch_heads, seq_len=seq_len, d_k=d_k)
    for name, buf in buffers.items():
        check_buffer(op, name, buf, batch_heads * seq_len * d_k, "batch_heads*seq_len*d_k")


def _probs(dev, q, k, batch_heads: int, seq_len: int, d_k: int):
    scores = matmul_strided(dev, q, k, batch_heads, seq_len, seq_len, d_k, trans_b=True,
                            alpha=1.0 / math.sqrt(d_k), op="attention")
    return softmax(dev, scores, batch_heads * seq_len, seq_len)


def attention_probs(dev, q, k, batch_heads: int, seq_len: int, d_k: int):
    """P = softmax(q k^T / sqrt(d_k)) row-wise: q, k [batch_heads, seq_len, d_k] ->
    [batch_heads, seq_len, seq_len]. What the forward computes and the backward needs."""
    _check_qkv("attention_probs", batch_heads, seq_len, d_k, q=q, k=k)
    return _probs(dev, q, k, batch_heads, seq_len, d_k)


def scaled_dot_product_attention(dev, q, k, v, batch_heads: int, seq_len: int, d_k: int):
    """softmax(q k^T / sqrt(d_k)) v: q, k, v [batch_heads, seq_len, d_k] ->
    [batch_heads, seq_len, d_k] (no mask, no dropout)."""
    _check_qkv("scaled_dot_product_attention", batch_heads, seq_len, d_k, q=q, k=k, v=v)
    if flash_attention.variant(dev, q.dtype, d_k, d_k, batch_heads) is not None:  # ANYGPU_FLASH, matrix units
        return flash_attention.flash_attention(dev, q, k, v, batch_heads, seq_len, seq_len, d_k, d_k)[0]
    probs = _probs(dev, q, k, batch_heads, seq_len, d_k)
    return matmul_strided(dev, probs, v, batch_heads, seq_len, d_k, seq_len, op="attention")


def attention_backward(dev, grad_out, q, k, v, batch_heads: int, seq_len: int, d_k: int, probs=None):
    """Gradients of scaled_dot_product_attention: grad_out, q, k, v [batch_heads, seq_len, d_k]
    -> (dq, dk, dv), each [batch_heads, seq_len, d_k].

    probs: the forward's attention_probs(q, k, ...) if kept, else it is recomputed.
    With O = P v, S = q k^T / sqrt(d_k), P = softmax(S):
    dv = P^T dO, dP = dO v^T, dS = P * (dP - rowsum(dP * P)), dq = dS k / sqrt(d_k),
    dk = dS^T q / sqrt(d_k)."""
    op = "attention_backward"
    _check_qkv(op, batch_heads, seq_len, d_k, grad_out=grad_out, q=q, k=k, v=v)
    if probs is not None:
        check_buffer(op, "probs", probs, batch_heads * seq_len * seq_len, "batch_heads*seq_len*seq_len")
    elif flash_attention.variant(dev, q.dtype, d_k, d_k, batch_heads) is not None:  # recompute out and lse
        out, lse = flash_attention.flash_attention(dev, q, k, v, batch_heads, seq_len, seq_len, d_k, d_k)
        return flash_attention.flash_attention_backward(dev, grad_out, q, k, v, out, lse, batch_heads, seq_len,
                                                        seq_len, d_k, d_k)
    else:
        probs = _probs(dev, q, k, batch_heads, seq_len, d_k)
    bh, s, d = batch_heads, seq_len, d_k
    scale = 1.0 / math.sqrt(d_k)
    dv = matmul_strided(dev, probs, grad_out, bh, s, d, s, trans_a=True, op=op)
    d_probs = matmul_strided(dev, grad_out, v, bh, s, s, d, trans_b=True, op=op)
    d_scores = softmax_backward(dev, d_probs, probs, bh * s, s)
    dq = matmul_strided(dev, d_scores, k, bh, s, d, s, alpha=scale, op=op)
    dk = matmul_strided(dev, d_scores, q, bh, s, d, s, trans_a=True, alpha=scale, op=op)
    return dq, dk, dv
