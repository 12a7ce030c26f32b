"""Layer normalisation (Layer 0) over the trailing `cols` elements of each row, and its backward."""

from __future__ import annotations

import os

from ..runtime import load_shader
from ._common import check_buffer, check_positive
from .row_gen import PARAM_FORMAT, RowConfig, generate

__all__ = ["layer_norm", "layer_norm_backward"]


def _check_affine(op, gamma, beta, cols, dtype="f32"):
    for name, buf in (("gamma", gamma), ("beta", beta)):
        if buf is not None:
            check_buffer(op, name, buf, cols, "cols")
            if buf.dtype != dtype:
                raise ValueError(f"{op}: {name} is {buf.dtype} but x is {dtype}; they must share one dtype")


def layer_norm(dev, x, gamma, beta, rows: int, cols: int, eps: float = 1e-5, config=None, one_pass: bool = True):
    """x [rows, cols] -> (y [rows, cols] of x's dtype, stats [rows, 2] f32 = (mean, 1/sqrt(var + eps))).

    x is f32 or f16 storage (computed in f32); gamma, beta: [cols] Buffers of x's dtype or
    None (no scale / no shift). Biased variance, as torch. config: a row_gen.RowConfig (its
    lean forms too, row_gen.lean_configs: the same results, and f16's word forms,
    row_gen.word_configs), or "loop" for the looped kernel;
    default: the tuned choice (ops/norm_tune.py). one_pass=False makes a register config
    use its two-reduction form only (comparisons and tests)."""
    op = "layer_norm"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "x", x, rows * cols, "rows*cols")
    if x.dtype not in ("f32", "f16"):
        raise ValueError(f"{op}: expected f32 or f16 storage, got {x.dtype}")
    _check_affine(op, gamma, beta, cols, x.dtype)
    if config is None:
        from . import norm_tune
        config = norm_tune.choose(dev, (x.dtype, rows, cols))
    elif isinstance(config, RowConfig) and not config.serves(cols):
        raise ValueError(f"{op}: register config {config.name} cannot hold rows of {cols} elements")
    flags = (gamma is not None) | ((beta is not None) << 1)  # bits 29-31 stay 0: the held forms rely on it
    y, stats = dev.empty(rows * cols, x.dtype), dev.empty(2 * rows)
    if isinstance(config, RowConfig):
        name = f"layer_norm[{config.name}{'' if one_pass else ' two-pass'}]"
        kernel = dev.kernel(name, generate(op, config, x.dtype, one_pass, cols, flags), 3, 2, PARAM_FORMAT)
    else:
        kernel = dev.kernel("layer_norm", load_shader("layer_norm.wgsl", dtype=x.dtype), 3, 2, "IIfI")
    dev.launch(kernel, [x, gamma if gamma is not None else x, beta if beta is not None else x], [y, stats],
               (rows, cols, float(eps), flags), dev.grid(rows))
    return y, stats


def layer_norm_backward(dev, grad_out, x, gamma, stats, rows: int, cols: int, want_affine: bool = True):
    """-> (grad_x [rows, cols], grad_gamma [cols] or None, grad_beta [cols] or None).

    stats is the forward's [rows, 2]; the affine gradients are computed when want_affine."""
    check_positive("layer_norm_backward", rows=rows, cols=cols)
    for name, buf, n, formula in (("grad_out", grad_out, rows * cols, "rows*cols"),
                                  ("x", x, rows * cols, "rows*cols"), ("stats", stats, 2 * rows, "2*rows")):
        check_buffer("layer_norm_backward", name, buf, n, formula)
    _check_affine("layer_norm_backward", gamma, None, cols)
    if want_affine and cols <= _CHUNKS_MAX_COLS and _CHUNKS_WORKGROUPS[0] > 0:
        return _backward_chunks(dev, grad_out, x, gamma, stats, rows, cols)
    flags = (gamma is not None) | (4 if want_affine else 0)
    grad_x = dev.empty(rows * cols)
    grad_out_xhat = dev.empty(rows * cols if want_affine else 1)
    kernel = dev.kernel("layer_norm_backward", load_shader("layer_norm_backward.wgsl"), 4, 2, "IIfI")
    dev.launch(kernel, [grad_out, x, gamma if gamma is not None else x, stats], [grad_x, grad_out_xhat],
               (rows, cols, 0.0, flags), dev.grid(rows))
    if not want_affine:
        return grad_x, None, None
    grad_gamma = dev.reduce_axis(grad_out_xhat, 1, rows, cols, "sum")
    grad_beta = dev.reduce_axis(grad_out, 1, rows, cols, "sum")
    return grad_x, grad_gamma, grad_beta



_CHUNKS_PER_THREAD = 16          # columns a thread of the chunked kernel holds in registers
_CHUNKS_MAX_COLS = 64 * _CHUNKS_PER_THREAD
# About this many workgroups (rows / chunk). On the H200 (benchmarks/ln_backward.py, 2026-12-04),
# [16384, 384]: 44.7 us at 1024, 46.4 at 2048, 56 at 8192, against 63.2 for the one-row kernel and
# its two reductions (torch: 102). ANYGPU_LN_CHUNKS=0: the one-row path (to measure against).
_CHUNKS_WORKGROUPS = [int(os.environ.get("ANYGPU_LN_CHUNKS", "1024") or 0)]


def _chunk_sums(dev, grad_out, x, gamma, stats, rows: int, cols: int):
    """(grad_x, sums): layer_norm_backward_chunks.wgsl's grad_x and per-chunk partial sums of
    the affine gradients, then one reduction of those [chunks, 2 * cols] to sums [2 * cols]
    (grad_gamma, then grad_beta)."""
    chunk = max(1, -(-rows // _CHUNKS_WORKGROUPS[0]))
    chunks = -(-rows // chunk)
    grad_x = dev.empty(rows * cols)
    partial = dev.empty(chunks * 2 * cols)
    kernel = dev.op_kernels.get("layer_norm_backward_chunks")
    if kernel is None:
        kernel = dev.op_kernels["layer_norm_backward_chunks"] = dev.kernel(
            "layer_norm_backward_chunks", load_shader("layer_norm_backward_chunks.wgsl", PER=_CHUNKS_PER_THREAD),
            4, 2, "IIII")
    dev.launch(kernel, [grad_out, x, gamma if gamma is not None else x, stats], [grad_x, partial],
               (rows, cols, chunk, int(gamma is not None)), dev.grid(chunks))
    return grad_x, dev.reduce_axis(partial, 1, chunks, 2 * cols, "sum")


def _backward_chunks(dev, grad_out, x, gamma, stats, rows: int, cols: int):
    """grad_x, grad_gamma, grad_beta through _chunk_sums (on the H200's nanoGPT step: 3 dispatches
    a norm instead of 5, and no [rows, cols] grad_out * xhat)."""
    grad_x, sums = _chunk_sums(dev, grad_out, x, gamma, stats, rows, cols)
    return grad_x, dev.copy(sums, n=cols), dev.copy(sums, n=cols, src_offset=cols)
