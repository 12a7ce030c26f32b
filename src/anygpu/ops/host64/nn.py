"""float64 counterparts of the network ops: attention, convolutions, group/batch/layer
normalisation, losses, optimizer updates, pooling, upsampling and GradScaler's unscale
(ops/attention.py, conv.py, norm.py, loss.py, optim.py, batchnorm.py, layernorm.py,
lossfn.py, pool.py, upsample.py, scaler.py).

Each takes its Device method's arguments, checks them as the GPU op does and returns what
it returns (layouts, NaN rules, what its backward reads from the forward), computed in numpy
float64: float results and saved statistics as HostBuffers, indices (max_pool2d) and the
unscale flag as GPU Buffers. Convolutions and pooling loop over the kernel's taps, each tap a
strided view of the padded input, so nothing of im2col's size is built."""

from __future__ import annotations

import math

import numpy as np

from ...runtime.dtypes import DTYPES
from ...runtime.host import HostBuffer
from .. import attention as _attention
from .. import batchnorm as _batchnorm
from .. import conv as _conv
from .. import lossfn as _lossfn
from .. import norm as _norm
from .. import optim as _optim
from .. import pool as _pool
from .. import scaler as _scaler
from .._common import check_buffer, check_pair, check_positive, check_same_len
from . import f64, host_op, values

# ---------------------------------------------------------------------------- helpers


def _f(dev, buf) -> np.ndarray:
    """buf's elements as float64 (a HostBuffer's own array: read, never write)."""
    return np.asarray(values(dev, buf), dtype=np.float64)


def _store(dev, buf, arr) -> None:
    """Overwrite buf in place: a HostBuffer's array, or a GPU Buffer's elements (rounded)."""
    if buf.__class__ is HostBuffer:
        buf.arr[...] = np.asarray(arr, dtype=np.float64).reshape(-1)
    else:
        dev.write(buf, np.asarray(arr).reshape(-1).astype(DTYPES[buf.dtype].host))


def _softmax_last(s: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, max-shifted (a row holding +inf, or only -inf, gives NaN as torch)."""
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _taps(out: int, kernel: int, stride: int, dilation: int):
    """For each tap r, the slice of a padded axis it reads for outputs 0..out-1."""
    return [slice(r * dilation, r * dilation + (out - 1) * stride + 1, stride) for r in range(kernel)]


# -------------------------------------------------------------------------- attention


def _probs(q, k, d_k: int) -> np.ndarray:
    return _softmax_last(np.matmul(q, k.transpose(0, 2, 1)) * (1.0 / math.sqrt(d_k)))


def _qkv(dev, shape, *bufs):
    return [_f(dev, b).reshape(shape) for b in bufs]


@host_op("attention_probs")
def attention_probs(dev, q, k, batch_heads: int, seq_len: int, d_k: int):
    _attention._check_qkv("attention_probs", batch_heads, seq_len, d_k, q=q, k=k)
    q_, k_ = _qkv(dev, (batch_heads, seq_len, d_k), q, k)
    return f64(dev, _probs(q_, k_, d_k))


@host_op("scaled_dot_product_attention")
def scaled_dot_product_attention(dev, q, k, v, batch_heads: int, seq_len: int, d_k: int):
    _attention._check_qkv("scaled_dot_product_attention", batch_heads, seq_len, d_k, q=q, k=k, v=v)
    q_, k_, v_ = _qkv(dev, (batch_heads, seq_len, d_k), q, k, v)
    return f64(dev, np.matmul(_probs(q_, k_, d_k), v_))


@host_op("attention_backward")
def attention_backward(dev, grad_out, q, k, v, batch_heads: int, seq_len: int, d_k: int, probs=None):
    op = "attention_backward"
    _attention._check_qkv(op, batch_heads, seq_len, d_k, grad_out=grad_out, q=q, k=k, v=v)
    go, q_, k_, v_ = _qkv(dev, (batch_heads, seq_len, d_k), grad_out, q, k, v)
    if probs is not None:
        check_buffer(op, "probs", probs, batch_heads * seq_len * seq_len, "batch_heads*seq_len*seq_len")
        p = _f(dev, probs).reshape(batch_heads, seq_len, seq_len)
    else:
        p = _probs(q_, k_, d_k)
    scale = 1.0 / math.sqrt(d_k)
    dv = np.matmul(p.transpose(0, 2, 1), go)
    d_probs = np.matmul(go, v_.transpose(0, 2, 1))
    d_scores = p * (d_probs - (d_probs * p).sum(axis=-1, keepdims=True))
    dq = np.matmul(d_scores, k_) * scale
    dk = np.matmul(d_scores.transpose(0, 2, 1), q_) * scale
    return f64(dev, dq), f64(dev, dk), f64(dev, dv)


# ------------------------------------------------------------------------ convolutions


def _correlate(x, weight, groups: int, out_h: int, out_w: int, stride, padding, dilation):
    """conv2d of x [batch, in_c, in_h, in_w] with weight [out_c, in_c/groups, kh, kw] (no bias)."""
    batch, in_c = x.shape[:2]
    out_c, c, kh, kw = weight.shape
    padded = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    padded = padded.reshape(batch, groups, c, *padded.shape[2:])
    w = weight.reshape(groups, out_c // groups, c, kh, kw)
    out = np.zeros((batch, groups, out_c // groups, out_h * out_w))
    rows = _taps(out_h, kh, stride[0], dilation[0])
    cols = _taps(out_w, kw, stride[1], dilation[1])
    for r, row in enumerate(rows):
        for s, col in enumerate(cols):
            tap = padded[:, :, :, row, col].reshape(batch, groups, c, out_h * out_w)
            out += np.matmul(w[:, :, :, r, s], tap)
    return out.reshape(batch, out_c, out_h, out_w)


def _transposed(x, weight, groups: int, out_h: int, out_w: int, stride, padding, dilation):
    """conv_transpose2d of x [batch, in_c, in_h, in_w] with weight [in_c, out_c/groups, kh, kw]
    into exactly out_h x out_w (rows the taps never reach stay 0; no bias)."""
    batch, in_c, in_h, in_w = x.shape
    _, o, kh, kw = weight.shape
    c = in_c // groups
    full_h = max((in_h - 1) * stride[0] + dilation[0] * (kh - 1) + 1, padding[0] + out_h)
    full_w = max((in_w - 1) * stride[1] + dilation[1] * (kw - 1) + 1, padding[1] + out_w)
    full = np.zeros((batch, groups, o, full_h, full_w))
    xg = x.reshape(batch, groups, c, in_h * in_w)
    w = weight.reshape(groups, c, o, kh, kw)
    rows = _taps(in_h, kh, stride[0], dilation[0])
    cols = _taps(in_w, kw, stride[1], dilation[1])
    for r, row in enumerate(rows):
        for s, col in enumerate(cols):
            part = np.matmul(w[:, :, :, r, s].transpose(0, 2, 1), xg)
            full[:, :, :, row, col] += part.reshape(batch, groups, o, in_h, in_w)
    out = full[:, :, :, padding[0]:padding[0] + out_h, padding[1]:padding[1] + out_w]
    return out.reshape(batch, groups * o, out_h, out_w)


@host_op("conv2d")
def conv2d(dev, input, weight, bias, batch: int, in_c: int, in_h: int, in_w: int, out_c: int,
           kh: int, kw: int, stride=1, padding=0, dilation=1, groups: int = 1, tiles=None):
    stride, padding, dilation, out_h, out_w = _conv.check_conv2d(
        "conv2d", input, weight, bias, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding, dilation, groups)
    out = _correlate(_f(dev, input).reshape(batch, in_c, in_h, in_w),
                     _f(dev, weight).reshape(out_c, in_c // groups, kh, kw), groups, out_h, out_w,
                     stride, padding, dilation)
    if bias is not None:
        out += _f(dev, bias).reshape(1, out_c, 1, 1)
    return f64(dev, out)


@host_op("conv_transpose2d")
def conv_transpose2d(dev, input, weight, bias, batch: int, in_c: int, in_h: int, in_w: int, out_c: int,
                     kh: int, kw: int, stride=1, padding=0, output_padding=0, dilation=1, groups: int = 1):
    stride, padding, dilation, out_h, out_w = _conv.check_conv_transpose2d(
        "conv_transpose2d", input, weight, bias, batch, in_c, in_h, in_w, out_c, kh, kw, stride, padding,
        output_padding, dilation, groups)
    out = _transposed(_f(dev, input).reshape(batch, in_c, in_h, in_w),
                      _f(dev, weight).reshape(in_c, out_c // groups, kh, kw), groups, out_h, out_w,
                      stride, padding, dilation)
    if bias is not None:
        out += _f(dev, bias).reshape(1, out_c, 1, 1)
    return f64(dev, out)


@host_op("conv2d_grad_input")
def conv2d_grad_input(dev, grad_out, weight, batch: int, in_c: int, in_h: int, in_w: int, out_c: int,
                      out_h: int, out_w: int, kh: int, kw: int, stride=1, padding=0, dilation=1,
                      groups: int = 1):
    op = "conv2d_grad_input"
    stride, padding, dilation = _conv._check_conv_gradient(op, batch, in_c, in_h, in_w, out_c, out_h, out_w,
                                                           kh, kw, stride, padding, dilation, groups)
    check_buffer(op, "grad_out", grad_out, batch * out_c * out_h * out_w, "batch*out_c*out_h*out_w")
    check_buffer(op, "weight", weight, out_c * (in_c // groups) * kh * kw, "out_c*(in_c/groups)*kh*kw")
    # conv2d's weight [out_c, in_c/groups, kh, kw] is the transposed convolution's layout.
    return f64(dev, _transposed(_f(dev, grad_out).reshape(batch, out_c, out_h, out_w),
                                _f(dev, weight).reshape(out_c, in_c // groups, kh, kw), groups, in_h, in_w,
                                stride, padding, dilation))


@host_op("conv2d_grad_weight")
def conv2d_grad_weight(dev, input, grad_out, batch: int, in_c: int, in_h: int, in_w: int, out_c: int,
                       out_h: int, out_w: int, kh: int, kw: int, stride=1, padding=0, dilation=1,
                       groups: int = 1, tiles=None):
    op = "conv2d_grad_weight"
    stride, padding, dilation = _conv._check_conv_gradient(op, batch, in_c, in_h, in_w, out_c, out_h, out_w,
                                                           kh, kw, stride, padding, dilation, groups)
    check_buffer(op, "input", input, batch * in_c * in_h * in_w, "batch*in_c*in_h*in_w")
    check_buffer(op, "grad_out", grad_out, batch * out_c * out_h * out_w, "batch*out_c*out_h*out_w")
    c, o = in_c // groups, out_c // groups
    x = _f(dev, input).reshape(batch, in_c, in_h, in_w)
    padded = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    padded = padded.reshape(batch, groups, c, *padded.shape[2:])
    go = _f(dev, grad_out).reshape(batch, groups, o, out_h * out_w)
    grad = np.zeros((groups, o, c, kh, kw))
    rows = _taps(out_h, kh, stride[0], dilation[0])
    cols = _taps(out_w, kw, stride[1], dilation[1])
    for r, row in enumerate(rows):
        for s, col in enumerate(cols):
            tap = padded[:, :, :, row, col].reshape(batch, groups, c, out_h * out_w)
            grad[:, :, :, r, s] = np.matmul(go, tap.transpose(0, 1, 3, 2)).sum(axis=0)
    return f64(dev, grad)


@host_op("conv2d_grad_bias")
def conv2d_grad_bias(dev, grad_out, batch: int, out_c: int, out_h: int, out_w: int):
    op = "conv2d_grad_bias"
    check_positive(op, batch=batch, out_c=out_c, out_h=out_h, out_w=out_w)
    check_buffer(op, "grad_out", grad_out, batch * out_c * out_h * out_w, "batch*out_c*out_h*out_w")
    return f64(dev, _f(dev, grad_out).reshape(batch, out_c, out_h * out_w).sum(axis=(0, 2)))


# ----------------------------------------------------------------------- normalisation


def _moments(x: np.ndarray, axis) -> tuple[np.ndarray, np.ndarray]:
    """Mean and biased variance over axis, in two passes (keepdims)."""
    mean = x.mean(axis=axis, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        return mean, np.square(x - mean).mean(axis=axis, keepdims=True)


def _rstd(variance: np.ndarray, eps: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 / np.sqrt(variance + eps)


def _group_xhat(dev, x, batch: int, channels: int, spatial: int, groups: int, eps: float):
    xg = _f(dev, x).reshape(batch, groups, (channels // groups) * spatial)
    mean, variance = _moments(xg, 2)
    rstd = _rstd(variance, eps)
    with np.errstate(invalid="ignore"):
        return (xg - mean) * rstd, rstd


@host_op("group_norm")
def group_norm(dev, x, gamma, beta, batch: int, channels: int, spatial: int, groups: int, eps: float = 1e-5):
    _norm._check("group_norm", batch, channels, spatial, groups, eps, x=x, gamma=gamma, beta=beta)
    xhat, _ = _group_xhat(dev, x, batch, channels, spatial, groups, eps)
    y = xhat.reshape(batch, channels, spatial) * _f(dev, gamma)[:, None] + _f(dev, beta)[:, None]
    return f64(dev, y)


@host_op("group_norm_backward")
def group_norm_backward(dev, grad_out, x, gamma, batch: int, channels: int, spatial: int, groups: int,
                        eps: float = 1e-5):
    _norm._check("group_norm_backward", batch, channels, spatial, groups, eps, grad_out=grad_out, x=x, gamma=gamma)
    xhat, rstd = _group_xhat(dev, x, batch, channels, spatial, groups, eps)
    dy = _f(dev, grad_out).reshape(batch, channels, spatial)
    dy_gamma = (dy * _f(dev, gamma)[:, None]).reshape(xhat.shape)
    dx = rstd * (dy_gamma - dy_gamma.mean(axis=2, keepdims=True)
                 - xhat * (dy_gamma * xhat).mean(axis=2, keepdims=True))
    dgamma = (dy * xhat.reshape(dy.shape)).sum(axis=(0, 2))
    return f64(dev, dx), f64(dev, dgamma), f64(dev, dy.sum(axis=(0, 2)))


@host_op("batch_norm_stats")
def batch_norm_stats(dev, x, batch: int, channels: int, spatial: int, running_mean=None, running_var=None,
                     momentum: float = 0.1):
    op = "batch_norm_stats"
    _batchnorm._check(op, batch, channels, spatial, x=x, running_mean=running_mean, running_var=running_var)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: give both running_mean and running_var, or neither")
    count = batch * spatial
    if running_mean is not None and count < 2:
        raise ValueError(f"{op}: the unbiased running variance needs at least 2 values per channel, "
                         f"got batch*spatial = {count}")
    mean, variance = _moments(_f(dev, x).reshape(batch, channels, spatial), (0, 2))
    mean, variance = mean.reshape(-1), variance.reshape(-1)
    if running_mean is not None:
        m = float(momentum)
        _store(dev, running_mean, (1.0 - m) * _f(dev, running_mean) + m * mean)
        _store(dev, running_var, (1.0 - m) * _f(dev, running_var) + m * variance * count / (count - 1))
    return f64(dev, mean), f64(dev, variance)


@host_op("batch_norm_apply")
def batch_norm_apply(dev, x, mean, variance, gamma, beta, batch: int, channels: int, spatial: int,
                     eps: float = 1e-5):
    _batchnorm._check("batch_norm_apply", batch, channels, spatial, x=x, mean=mean, variance=variance,
                      gamma=gamma, beta=beta)
    y = (_f(dev, x).reshape(batch, channels, spatial) - _f(dev, mean)[:, None]) \
        * _rstd(_f(dev, variance), eps)[:, None]
    if gamma is not None:
        y = y * _f(dev, gamma)[:, None]
    if beta is not None:
        y = y + _f(dev, beta)[:, None]
    return f64(dev, y)


@host_op("batch_norm_backward")
def batch_norm_backward(dev, grad_out, x, mean, variance, gamma, batch: int, channels: int, spatial: int,
                        eps: float = 1e-5, training: bool = True):
    _batchnorm._check("batch_norm_backward", batch, channels, spatial, grad_out=grad_out, x=x, mean=mean,
                      variance=variance, gamma=gamma)
    g = _f(dev, grad_out).reshape(batch, channels, spatial)
    rstd = _rstd(_f(dev, variance), eps)[:, None]
    xhat = (_f(dev, x).reshape(batch, channels, spatial) - _f(dev, mean)[:, None]) * rstd
    grad_beta = g.sum(axis=(0, 2))
    grad_gamma = (g * xhat).sum(axis=(0, 2))
    scale = rstd if gamma is None else rstd * _f(dev, gamma)[:, None]
    if training:
        count = batch * spatial
        g = g - grad_beta[:, None] / count - xhat * (grad_gamma[:, None] / count)
    return f64(dev, scale * g), f64(dev, grad_gamma), f64(dev, grad_beta)


def _layer_affine(op: str, gamma, beta, cols: int) -> None:
    for name, buf in (("gamma", gamma), ("beta", beta)):
        if buf is not None:
            check_buffer(op, name, buf, cols, "cols")


@host_op("layer_norm")
def layer_norm(dev, x, gamma, beta, rows: int, cols: int, eps: float = 1e-5, config=None, one_pass: bool = True):
    """(y [rows, cols], stats [rows, 2] = (mean, 1/sqrt(var + eps))), both float64; config and
    one_pass choose GPU kernels and mean nothing here."""
    op = "layer_norm"
    check_positive(op, rows=rows, cols=cols)
    check_buffer(op, "x", x, rows * cols, "rows*cols")
    _layer_affine(op, gamma, beta, cols)
    xr = _f(dev, x).reshape(rows, cols)
    mean, variance = _moments(xr, 1)
    rstd = _rstd(variance, eps)
    y = (xr - mean) * rstd
    if gamma is not None:
        y = y * _f(dev, gamma)
    if beta is not None:
        y = y + _f(dev, beta)
    return f64(dev, y), f64(dev, np.concatenate([mean, rstd], axis=1))


@host_op("layer_norm_backward")
def layer_norm_backward(dev, grad_out, x, gamma, stats, rows: int, cols: int, want_affine: bool = True):
    op = "layer_norm_backward"
    check_positive(op, rows=rows, cols=cols)
    for name, buf, n, formula in (("grad_out", grad_out, rows * cols, "rows*cols"),
                                  ("x", x, rows * cols, "rows*cols"), ("stats", stats, 2 * rows, "2*rows")):
        check_buffer(op, name, buf, n, formula)
    _layer_affine(op, gamma, None, cols)
    st = _f(dev, stats).reshape(rows, 2)
    mean, rstd = st[:, :1], st[:, 1:]
    g = _f(dev, grad_out).reshape(rows, cols)
    xhat = (_f(dev, x).reshape(rows, cols) - mean) * rstd
    gy = g if gamma is None else g * _f(dev, gamma)
    grad_x = rstd * (gy - gy.mean(axis=1, keepdims=True) - xhat * (gy * xhat).mean(axis=1, keepdims=True))
    if not want_affine:
        return f64(dev, grad_x), None, None
    return f64(dev, grad_x), f64(dev, (g * xhat).sum(axis=0)), f64(dev, g.sum(axis=0))


# ----------------------------------------------------------------------------- losses


@host_op("mse_loss")
def mse_loss(dev, pred, target):
    check_same_len("mse_loss", pred, target, ("pred", "target"))
    if pred.len == 0:
        raise ValueError("mse_loss: pred and target are empty; the mean of no elements is undefined")
    with np.errstate(invalid="ignore", over="ignore"):
        return f64(dev, [np.square(_f(dev, pred) - _f(dev, target)).mean()])


def _class_rows(dev, logits, target, weight, rows: int, classes: int, ignore_index: int, log_probs: bool):
    """The pieces of lossfn.cross_entropy_rows as numpy: (parts [2, rows], stats [rows, 2],
    row_weight [rows]) and what the mean needs."""
    _lossfn._check("cross_entropy", logits, target, weight, rows, classes)
    x = _f(dev, logits).reshape(rows, classes)
    w = _f(dev, weight)
    t = np.asarray(values(dev, target)).astype(np.int64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if log_probs:
            lse = np.zeros((rows, 1))
        else:
            top = x.max(axis=1, keepdims=True)
            lse = top + np.log(np.exp(x - top).sum(axis=1, keepdims=True))
        log_p = x - lse
        ignored = t == ignore_index
        outside = ~ignored & ((t < 0) | (t >= classes))
        picked = np.clip(t, 0, classes - 1)
        w_t = w[picked]
        nll = -w_t * log_p[np.arange(rows), picked]
        smooth = -(log_p * w).sum(axis=1)
    nll, smooth, w_t = (np.where(outside, np.nan, np.where(ignored, 0.0, a)) for a in (nll, smooth, w_t))
    stats = np.concatenate([lse, np.full((rows, 1), w.sum())], axis=1)
    return np.stack([nll, smooth]), stats, w_t


@host_op("cross_entropy_rows")
def cross_entropy_rows(dev, logits, target, weight, rows: int, classes: int,
                       ignore_index: int = -100, log_probs: bool = False):
    parts, stats, row_weight = _class_rows(dev, logits, target, weight, rows, classes, ignore_index, log_probs)
    return f64(dev, parts), f64(dev, stats), f64(dev, row_weight)


@host_op("cross_entropy_mean")
def cross_entropy_mean(dev, logits, target, weight, rows: int, classes: int,
                       ignore_index: int = -100, log_probs: bool = False):
    if rows > _lossfn.MEAN_ROWS:
        raise ValueError(f"cross_entropy_mean: at most {_lossfn.MEAN_ROWS} rows, got {rows}")
    parts, stats, row_weight = _class_rows(dev, logits, target, weight, rows, classes, ignore_index, log_probs)
    total = row_weight.sum()
    with np.errstate(invalid="ignore", divide="ignore"):
        loss = parts[0].sum() / total
    return f64(dev, [loss]), f64(dev, np.append(stats.reshape(-1), total))


def _counts(d: np.ndarray) -> np.ndarray:
    """Where a derivative contributes (nonzero or NaN): a zero one gives 0 even for an infinite upstream."""
    return (d != 0) | np.isnan(d)


@host_op("cross_entropy_rows_backward")
def cross_entropy_rows_backward(dev, grad_parts, logits, target, weight, stats, rows: int, classes: int,
                                ignore_index: int = -100, log_probs: bool = False, mean: bool = False):
    op = "cross_entropy_backward"
    _lossfn._check(op, logits, target, weight, rows, classes)
    if mean:
        check_buffer(op, "grad_parts", grad_parts, 1, "1 (mean=True)")
        check_buffer(op, "stats", stats, 2 * rows + 1, "2*rows+1 (mean=True)")
    else:
        check_buffer(op, "grad_parts", grad_parts, 2 * rows, "2*rows")
        check_buffer(op, "stats", stats, 2 * rows, "2*rows")
    x = _f(dev, logits).reshape(rows, classes)
    w = _f(dev, weight)
    t = np.asarray(values(dev, target)).astype(np.int64)
    st = _f(dev, stats)
    lse, total_w = st[:2 * rows:2, None], st[1:2 * rows:2, None]
    gp = _f(dev, grad_parts)
    valid = (t != ignore_index) & (t >= 0) & (t < classes)
    picked = np.clip(t, 0, classes - 1)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p = np.zeros_like(x) if log_probs else np.exp(x - lse)
        hit = np.arange(classes)[None, :] == picked[:, None]
        d_nll = w[picked][:, None] * (p - hit)
        if mean:
            grad = np.where(_counts(d_nll), (gp[0] / st[2 * rows]) * d_nll, 0.0)
        else:
            g_nll, g_smooth = gp[:rows, None], gp[rows:, None]
            d_smooth = total_w * p - w
            grad = (np.where(_counts(d_nll), g_nll * d_nll, 0.0)
                    + np.where(_counts(d_smooth) & (g_smooth != 0), g_smooth * d_smooth, 0.0))
    return f64(dev, np.where(valid[:, None], grad, 0.0))


# ------------------------------------------------------------------ optimizer updates


def _state(op: str, param, grad, **state):
    """Check param, grad and the state Buffers (one length; param and the state updated in
    place, so HostBuffers or float Buffers); return that length."""
    n = param.len
    for name, buf in (("param", param), ("grad", grad), *state.items()):
        check_buffer(op, name, buf, n, "len(param)" if name != "param" else "")
        if buf.dtype not in ("f64", "f32", "f16"):
            raise ValueError(f"{op}: {name} must be a float buffer, got {buf.dtype}")
    return n


def _signed_grad(dev, grad, maximize: bool) -> np.ndarray:
    g = np.array(_f(dev, grad))  # a copy: grad may be param itself
    return -g if maximize else g


def _lerp(start, end, weight: float):
    """torch.lerp with a scalar weight, in torch's two forms (below and from one half)."""
    if weight < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * (1.0 - weight)


def _skipped(dev, op: str, found_inf) -> bool:
    """Whether GradScaler's flag (one u32 GPU Buffer, or None) says to skip the update."""
    if found_inf is None:
        return False
    if found_inf.dtype != "u32" or found_inf.len != 1:
        raise ValueError(f"{op}: found_inf must be one u32, got {found_inf.len} x {found_inf.dtype}")
    return bool(dev.read(found_inf)[0])


def _unset(stored: np.ndarray) -> np.ndarray:
    """Where a momentum buffer still holds ops/optim.py's UNSET marker: its f32 bits, or in a
    float64 buffer that NaN converted to float64 (as a cast of the f32 state gives here)."""
    marker = getattr(_optim, "UNSET", None)
    if marker is None or stored.dtype not in (np.float32, np.float64):
        return np.zeros(stored.shape, bool)
    as_f32 = np.array([marker], np.uint32).view(np.float32)
    if stored.dtype == np.float32:
        return stored.view(np.uint32) == np.uint32(marker)
    return stored.view(np.uint64) == as_f32.astype(np.float64).view(np.uint64)[0]


@host_op("sgd_step")
def sgd_step(dev, param, grad, momentum_buf=None, *, lr: float, momentum: float = 0.0,
             dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
             first: bool = False, maximize: bool = False, found_inf=None) -> None:
    """found_inf: where GradScaler's flag is set nothing is written; a momentum buffer still
    holding the UNSET marker starts as the gradient (as ops/optim.sgd_step)."""
    state = {} if momentum_buf is None else {"momentum_buf": momentum_buf}
    if not _state("sgd_step", param, grad, **state) or _skipped(dev, "sgd_step", found_inf):
        return
    with np.errstate(invalid="ignore", over="ignore"):
        p = _f(dev, param)
        d = _signed_grad(dev, grad, maximize) + weight_decay * p
        if momentum_buf is not None:
            if first:
                buf = d
            else:
                stored = np.asarray(values(dev, momentum_buf))
                buf = np.where(_unset(stored), d, momentum * stored.astype(np.float64) + (1.0 - dampening) * d)
            _store(dev, momentum_buf, buf)
            d = d + momentum * buf if nesterov else buf
        _store(dev, param, p - lr * d)


def _adam_moments(dev, param, grad, exp_avg, exp_avg_sq, weight_decay, decay, beta1, beta2, maximize):
    """Decay the parameter, form the gradient and update both moments in place (lib/adam_moments.wgsl);
    -> (param, g, exp_avg, exp_avg_sq)."""
    p = _f(dev, param) * decay
    g = _signed_grad(dev, grad, maximize) + weight_decay * p
    m = _lerp(_f(dev, exp_avg), g, 1.0 - beta1)
    v = _f(dev, exp_avg_sq) * beta2 + ((1.0 - beta2) * g) * g
    _store(dev, exp_avg, m)
    _store(dev, exp_avg_sq, v)
    return p, g, m, v


def _adam(dev, op, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size, beta1, beta2, eps,
          bias_correction2_sqrt, weight_decay, decay, maximize) -> None:
    state = dict(exp_avg=exp_avg, exp_avg_sq=exp_avg_sq)
    if max_exp_avg_sq is not None:
        state["max_exp_avg_sq"] = max_exp_avg_sq
    if not _state(op, param, grad, **state):
        return
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p, _, m, v = _adam_moments(dev, param, grad, exp_avg, exp_avg_sq, weight_decay, decay, beta1, beta2,
                                   maximize)
        if max_exp_avg_sq is not None:
            v = np.maximum(_f(dev, max_exp_avg_sq), v)
            _store(dev, max_exp_avg_sq, v)
        _store(dev, param, p - step_size * (m / (np.sqrt(v) / bias_correction2_sqrt + eps)))


@host_op("adam_step")
def adam_step(dev, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq=None, *, step_size: float,
              beta1: float, beta2: float, eps: float, bias_correction2_sqrt: float,
              weight_decay: float = 0.0, decay: float = 1.0, maximize: bool = False) -> None:
    _adam(dev, "adam_step", param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size, beta1, beta2, eps,
          bias_correction2_sqrt, weight_decay, decay, maximize)


@host_op("adam_multi_step")
def adam_multi_step(dev, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs=None, *, step_sizes,
                    bias_correction2_sqrts, beta1: float, beta2: float, eps: float, weight_decay: float = 0.0,
                    decay: float = 1.0, maximize: bool = False) -> None:
    """adam_step on each parameter whose Buffers include a HostBuffer; the others (all GPU
    Buffers) go to the GPU op together."""
    lists = [("params", params), ("grads", grads), ("exp_avgs", exp_avgs), ("exp_avg_sqs", exp_avg_sqs),
             ("step_sizes", step_sizes), ("bias_correction2_sqrts", bias_correction2_sqrts)]
    amsgrad = max_exp_avg_sqs is not None
    if amsgrad:
        lists.append(("max_exp_avg_sqs", max_exp_avg_sqs))
    count = len(params)
    for name, entries in lists:
        if len(entries) != count:
            raise ValueError(f"adam_multi_step: {name} has {len(entries)} entries, params has {count}")
    maxes = max_exp_avg_sqs if amsgrad else [None] * count
    on_host = [any(b.__class__ is HostBuffer for b in (params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], maxes[i]))
               for i in range(count)]
    for i in (i for i in range(count) if on_host[i]):
        _adam(dev, f"adam_multi_step (parameter {i})", params[i], grads[i], exp_avgs[i], exp_avg_sqs[i], maxes[i],
              step_sizes[i], beta1, beta2, eps, bias_correction2_sqrts[i], weight_decay, decay, maximize)
    rest = [i for i in range(count) if not on_host[i]]
    if rest:
        def pick(entries):
            return [entries[i] for i in rest]
        _optim.adam_multi_step(dev, pick(params), pick(grads), pick(exp_avgs), pick(exp_avg_sqs),
                               pick(max_exp_avg_sqs) if amsgrad else None, step_sizes=pick(step_sizes),
                               bias_correction2_sqrts=pick(bias_correction2_sqrts), beta1=beta1, beta2=beta2,
                               eps=eps, weight_decay=weight_decay, decay=decay, maximize=maximize)


@host_op("adadelta_step")
def adadelta_step(dev, param, grad, square_avg, acc_delta, *, lr: float, rho: float, eps: float,
                  weight_decay: float = 0.0, maximize: bool = False) -> None:
    if not _state("adadelta_step", param, grad, square_avg=square_avg, acc_delta=acc_delta):
        return
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p = _f(dev, param)
        g = _signed_grad(dev, grad, maximize) + weight_decay * p
        v = _f(dev, square_avg) * rho + ((1.0 - rho) * g) * g
        acc = _f(dev, acc_delta)
        delta = np.sqrt(acc + eps) / np.sqrt(v + eps) * g
        _store(dev, square_avg, v)
        _store(dev, acc_delta, acc * rho + ((1.0 - rho) * delta) * delta)
        _store(dev, param, p - lr * delta)


@host_op("adagrad_step")
def adagrad_step(dev, param, grad, state_sum, *, clr: float, eps: float, weight_decay: float = 0.0,
                 maximize: bool = False) -> None:
    if not _state("adagrad_step", param, grad, state_sum=state_sum):
        return
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p = _f(dev, param)
        g = _signed_grad(dev, grad, maximize) + weight_decay * p
        total = _f(dev, state_sum) + g * g
        _store(dev, state_sum, total)
        _store(dev, param, p - clr * (g / (np.sqrt(total) + eps)))


@host_op("rmsprop_step")
def rmsprop_step(dev, param, grad, square_avg, grad_avg=None, momentum_buf=None, *, lr: float, alpha: float,
                 eps: float, weight_decay: float = 0.0, momentum: float = 0.0, maximize: bool = False) -> None:
    state = dict(square_avg=square_avg)
    if grad_avg is not None:
        state["grad_avg"] = grad_avg
    if momentum_buf is not None:
        state["momentum_buf"] = momentum_buf
    if not _state("rmsprop_step", param, grad, **state):
        return
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p = _f(dev, param)
        g = _signed_grad(dev, grad, maximize) + weight_decay * p
        v = _f(dev, square_avg) * alpha + ((1.0 - alpha) * g) * g
        _store(dev, square_avg, v)
        if grad_avg is not None:
            m = _lerp(_f(dev, grad_avg), g, 1.0 - alpha)
            _store(dev, grad_avg, m)
            avg = np.sqrt(v - m * m) + eps
        else:
            avg = np.sqrt(v) + eps
        if momentum_buf is not None:
            buf = _f(dev, momentum_buf) * momentum + g / avg
            _store(dev, momentum_buf, buf)
            _store(dev, param, p - lr * buf)
        else:
            _store(dev, param, p - lr * (g / avg))


@host_op("nadam_step")
def nadam_step(dev, param, grad, exp_avg, exp_avg_sq, *, beta1: float, beta2: float, eps: float,
               bias_correction2: float, grad_coef: float, avg_coef: float, weight_decay: float = 0.0,
               decay: float = 1.0, maximize: bool = False) -> None:
    if not _state("nadam_step", param, grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq):
        return
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p, g, m, v = _adam_moments(dev, param, grad, exp_avg, exp_avg_sq, weight_decay, decay, beta1, beta2,
                                   maximize)
        denom = np.sqrt(v / bias_correction2) + eps
        _store(dev, param, (p + grad_coef * (g / denom)) + avg_coef * (m / denom))


@host_op("radam_step")
def radam_step(dev, param, grad, exp_avg, exp_avg_sq, *, lr: float, beta1: float, beta2: float, eps: float,
               bias_correction1: float, bias_correction2_sqrt: float, rect: float | None,
               weight_decay: float = 0.0, decay: float = 1.0, maximize: bool = False) -> None:
    if not _state("radam_step", param, grad, exp_avg=exp_avg, exp_avg_sq=exp_avg_sq):
        return
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p, _, m, v = _adam_moments(dev, param, grad, exp_avg, exp_avg_sq, weight_decay, decay, beta1, beta2,
                                   maximize)
        update = m / bias_correction1 * lr
        if rect is not None:
            update = update * (bias_correction2_sqrt / (np.sqrt(v) + eps)) * rect
        _store(dev, param, p - update)


@host_op("adamax_step")
def adamax_step(dev, param, grad, exp_avg, exp_inf, *, clr: float, beta1: float, beta2: float, eps: float,
                weight_decay: float = 0.0, maximize: bool = False) -> None:
    if not _state("adamax_step", param, grad, exp_avg=exp_avg, exp_inf=exp_inf):
        return
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        p = _f(dev, param)
        g = _signed_grad(dev, grad, maximize) + weight_decay * p
        m = _lerp(_f(dev, exp_avg), g, 1.0 - beta1)
        u = np.maximum(_f(dev, exp_inf) * beta2, np.abs(g) + eps)
        _store(dev, exp_avg, m)
        _store(dev, exp_inf, u)
        _store(dev, param, p - clr * (m / u))


@host_op("rprop_step")
def rprop_step(dev, param, grad, prev, step_size, *, etaminus: float, etaplus: float, step_size_min: float,
               step_size_max: float, maximize: bool = False) -> None:
    """As torch.optim.Rprop (single tensor): a NaN gradient makes that element's step size NaN."""
    if not _state("rprop_step", param, grad, prev=prev, step_size=step_size):
        return
    with np.errstate(invalid="ignore", over="ignore"):
        g = _signed_grad(dev, grad, maximize)
        agreement = np.sign(g * _f(dev, prev))
        factor = np.where(agreement > 0, etaplus, np.where(agreement < 0, etaminus,
                                                           np.where(agreement == 0, 1.0, agreement)))
        size = np.clip(_f(dev, step_size) * factor, step_size_min, step_size_max)
        g = np.where(agreement < 0, 0.0, g)
        _store(dev, step_size, size)
        _store(dev, param, _f(dev, param) - np.sign(g) * size)
        _store(dev, prev, g)


# ------------------------------------------------------------------------------ pooling


def _pool_geometry(op: str, in_h: int, in_w: int, out_h: int, out_w: int, kernel, stride, padding, dilation):
    """(kernel, stride, padding, dilation) pairs, the row and column slices of each tap into
    the input padded by padding before and enough after (ceil_mode windows may pass the
    right padding), and that padded size."""
    k, s, p, d = (check_pair(op, name, value, low) for name, value, low in
                  (("kernel_size", kernel, 1), ("stride", stride, 1), ("padding", padding, 0),
                   ("dilation", dilation, 1)))
    size = [max(n + p[a], (o - 1) * s[a] + d[a] * (k[a] - 1) + 1)
            for a, (n, o) in enumerate(((in_h, out_h), (in_w, out_w)))]
    return k, s, p, d, (_taps(out_h, k[0], s[0], d[0]), _taps(out_w, k[1], s[1], d[1])), size


def _padded(arr: np.ndarray, p, size, fill: float) -> np.ndarray:
    """arr [planes, h, w] placed at (p[0], p[1]) in a [planes, *size] array of fill."""
    planes, h, w = arr.shape
    out = np.full((planes, *size), fill)
    out[:, p[0]:p[0] + h, p[1]:p[1] + w] = arr
    return out


@host_op("max_pool2d")
def max_pool2d(dev, x, planes: int, in_h: int, in_w: int, kernel, stride, padding=0, dilation=1,
               ceil_mode: bool = False):
    """(values, indices i32 GPU Buffer (ih*in_w + iw; -1 for a window wholly in the padding),
    out_h, out_w); NaN wins (the first in the window), ties go to the first maximum."""
    _pool._check("max_pool2d", x, planes, in_h, in_w)
    out_h, out_w = _pool.pool2d_output_size("max_pool2d", in_h, in_w, kernel, stride, padding, dilation, ceil_mode)
    _, _, p, _, (rows, cols), size = _pool_geometry("max_pool2d", in_h, in_w, out_h, out_w, kernel, stride,
                                                    padding, dilation)
    xp = _padded(_f(dev, x).reshape(planes, in_h, in_w), p, size, -np.inf)
    position = _padded(np.arange(in_h * in_w, dtype=np.float64).reshape(1, in_h, in_w), p, size, -1.0)[0]
    taps = np.stack([xp[:, row, col] for row in rows for col in cols], axis=-1)
    where = np.stack([position[row, col] for row in rows for col in cols], axis=-1).astype(np.int64)
    valid = where >= 0
    nan = np.isnan(taps)
    has_nan = nan.any(axis=-1)
    top = np.where(valid & ~nan, taps, -np.inf).max(axis=-1, keepdims=True)
    best = (taps == top) & valid
    choice = np.where(has_nan, nan.argmax(axis=-1), best.argmax(axis=-1))
    found = has_nan | best.any(axis=-1)
    out = np.where(found, np.take_along_axis(taps, choice[..., None], axis=-1)[..., 0], -np.inf)
    index = np.where(found, np.take_along_axis(np.broadcast_to(where, taps.shape), choice[..., None], -1)[..., 0], -1)
    return f64(dev, out), dev.upload(index.astype(np.int32), "i32"), out_h, out_w


@host_op("max_pool2d_backward")
def max_pool2d_backward(dev, grad_out, indices, planes: int, in_h: int, in_w: int, out_h: int, out_w: int,
                        kernel, stride, padding=0, dilation=1):
    """grad_in: each window's gradient added where its recorded index is the element the tap reads."""
    op = "max_pool2d_backward"
    check_buffer(op, "grad_out", grad_out, planes * out_h * out_w, "planes*out_h*out_w")
    check_buffer(op, "indices", indices, planes * out_h * out_w, "planes*out_h*out_w")
    _, _, p, _, (rows, cols), size = _pool_geometry(op, in_h, in_w, out_h, out_w, kernel, stride, padding, dilation)
    g = _f(dev, grad_out).reshape(planes, out_h, out_w)
    chosen = np.asarray(values(dev, indices)).astype(np.int64).reshape(planes, out_h, out_w)
    position = _padded(np.arange(in_h * in_w, dtype=np.float64).reshape(1, in_h, in_w), p, size, -1.0)[0]
    grad = np.zeros((planes, *size))
    for row in rows:
        for col in cols:
            here = position[row, col]
            grad[:, row, col] += np.where((chosen == here) & (here >= 0), g, 0.0)
    return f64(dev, grad[:, p[0]:p[0] + in_h, p[1]:p[1] + in_w])


def _avg_divisor(in_h, in_w, out_h, out_w, k, s, p, count_include_pad, divisor_override):
    """The divisor of each window [out_h, out_w] (0 for a window wholly in the padding when
    count_include_pad is off) and whether the window touches the input."""
    h0 = np.arange(out_h)[:, None] * s[0] - p[0]
    w0 = np.arange(out_w)[None, :] * s[1] - p[1]
    h_end = np.minimum(h0 + k[0], in_h + p[0])
    w_end = np.minimum(w0 + k[1], in_w + p[1])
    inside_h = np.minimum(h_end, in_h) - np.maximum(h0, 0)
    inside_w = np.minimum(w_end, in_w) - np.maximum(w0, 0)
    touches = (inside_h > 0) & (inside_w > 0)
    if divisor_override:
        divisor = np.full((out_h, out_w), float(divisor_override))
    elif count_include_pad:
        divisor = ((h_end - h0) * (w_end - w0)).astype(np.float64)
    else:
        divisor = (np.maximum(inside_h, 0) * np.maximum(inside_w, 0)).astype(np.float64)
    return divisor, touches


@host_op("avg_pool2d")
def avg_pool2d(dev, x, planes: int, in_h: int, in_w: int, kernel, stride, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None):
    op = "avg_pool2d"
    _pool._check(op, x, planes, in_h, in_w)
    if divisor_override is not None and int(divisor_override) < 1:
        raise ValueError(f"avg_pool2d: divisor_override must be a positive integer, got {divisor_override!r}")
    out_h, out_w = _pool.pool2d_output_size(op, in_h, in_w, kernel, stride, padding, 1, ceil_mode)
    k, s, p, _, (rows, cols), size = _pool_geometry(op, in_h, in_w, out_h, out_w, kernel, stride, padding, 1)
    xp = _padded(_f(dev, x).reshape(planes, in_h, in_w), p, size, 0.0)
    total = np.zeros((planes, out_h, out_w))
    for row in rows:
        for col in cols:
            total += xp[:, row, col]
    divisor, touches = _avg_divisor(in_h, in_w, out_h, out_w, k, s, p, count_include_pad, divisor_override)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(touches, total / divisor, 0.0)
    return f64(dev, out), out_h, out_w


@host_op("avg_pool2d_backward")
def avg_pool2d_backward(dev, grad_out, planes: int, in_h: int, in_w: int, out_h: int, out_w: int,
                        kernel, stride, padding=0, count_include_pad: bool = True,
                        divisor_override: int | None = None):
    op = "avg_pool2d_backward"
    check_buffer(op, "grad_out", grad_out, planes * out_h * out_w, "planes*out_h*out_w")
    k, s, p, _, (rows, cols), size = _pool_geometry(op, in_h, in_w, out_h, out_w, kernel, stride, padding, 1)
    divisor, touches = _avg_divisor(in_h, in_w, out_h, out_w, k, s, p, count_include_pad, divisor_override)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(touches, _f(dev, grad_out).reshape(planes, out_h, out_w) / np.where(touches, divisor, 1.0),
                         0.0)
    grad = np.zeros((planes, *size))
    for row in rows:
        for col in cols:
            grad[:, row, col] += share
    return f64(dev, grad[:, p[0]:p[0] + in_h, p[1]:p[1] + in_w])


# --------------------------------------------------------------------------- upsample


@host_op("upsample_nearest2d")
def upsample_nearest2d(dev, x, batch: int, channels: int, in_h: int, in_w: int, scale_h: int, scale_w: int):
    op = "upsample_nearest2d"
    check_positive(op, batch=batch, channels=channels, in_h=in_h, in_w=in_w, scale_h=scale_h, scale_w=scale_w)
    check_buffer(op, "x", x, batch * channels * in_h * in_w, "batch*channels*in_h*in_w")
    planes = _f(dev, x).reshape(batch * channels, in_h, 1, in_w, 1)
    return f64(dev, np.broadcast_to(planes, (batch * channels, in_h, scale_h, in_w, scale_w)))


@host_op("upsample_nearest2d_backward")
def upsample_nearest2d_backward(dev, grad, batch: int, channels: int, in_h: int, in_w: int,
                                scale_h: int, scale_w: int):
    op = "upsample_nearest2d_backward"
    check_positive(op, batch=batch, channels=channels, in_h=in_h, in_w=in_w, scale_h=scale_h, scale_w=scale_w)
    check_buffer(op, "grad", grad, batch * channels * in_h * scale_h * in_w * scale_w,
                 "batch*channels*in_h*scale_h*in_w*scale_w")
    blocks = _f(dev, grad).reshape(batch * channels, in_h, scale_h, in_w, scale_w)
    return f64(dev, blocks.sum(axis=(2, 4)))


# --------------------------------------------------------------------------- GradScaler


@host_op("unscale_check")
def unscale_check(dev, grads, inverse: float | None = None, flag=None, scale=None):
    """float64 gradients multiplied in place on the host by `inverse`, or by the float32
    reciprocal of the one-element f32 Buffer `scale` (as torch's
    scale.double().reciprocal().float()); float32 ones by the GPU op. Returns the u32 flag
    (a GPU Buffer, as the GPU op's), set when a result is inf or NaN."""
    op = "unscale_check"
    if (inverse is None) == (scale is None):
        raise ValueError(f"{op}: give exactly one of inverse (a number) and scale (a Buffer)")
    for i, g in enumerate(grads):
        if g.dtype not in ("f32", "f64"):
            raise ValueError(f"{op}: gradient {i} must be f32 or f64, got {g.dtype}")
    for name, buf, dtype in (("flag", flag, "u32"), ("scale", scale, "f32")):
        if buf is not None and (buf.dtype != dtype or buf.len != 1):
            raise ValueError(f"{op}: {name} must be one {dtype}, got {buf.len} x {buf.dtype}")
    on_gpu = [g for g in grads if g.dtype == "f32"]
    if scale is None:
        flag = _scaler.unscale_check(dev, on_gpu, inverse, flag)
        factor = float(inverse)  # type: ignore[arg-type]
    else:
        flag = _scaler.unscale_check(dev, on_gpu, flag=flag, scale=scale)
        with np.errstate(divide="ignore"):
            factor = float(np.float32(1.0 / np.float64(dev.read(scale)[0])))
    bad = False
    with np.errstate(over="ignore", invalid="ignore"):
        for g in grads:
            if g.__class__ is HostBuffer:
                g.arr *= factor
                bad = bad or not bool(np.isfinite(g.arr).all())
    if bad:
        dev.write(flag, np.ones(1, np.uint32))
    return flag
