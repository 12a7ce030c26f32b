"""More of torch.nn.functional, composed from Tensor ops and the functional ops in
functional.py (their backward, dtypes and float16 handling come with them).

functional.py re-exports every name in __all__ at its end."""

from __future__ import annotations

import math

import numpy as np

from .. import dtypes as _dtypes
from ..tensor import Tensor, float32, int64, tensor, where, zeros
from .functional import (
    _normalized_shape, _one, _pair, _reduce, _reduction, _tensor, avg_pool1d, avg_pool2d, celu, default_generator, elu, hardtanh,
    interpolate, leaky_relu, max_pool1d, max_pool2d, pad, relu, selu,
)
from .functional import threshold as _threshold  # (threshold_'s argument is named threshold, as torch's)

__all__ = [
    "rms_norm", "relu_", "elu_", "leaky_relu_", "hardtanh_", "selu_", "celu_", "threshold_",
    "softshrink", "hardshrink", "channel_shuffle", "local_response_norm", "alpha_dropout", "feature_alpha_dropout",
    "pdist", "lp_pool1d", "lp_pool2d", "max_pool1d_with_indices", "max_pool2d_with_indices", "max_unpool1d",
    "max_unpool2d", "multi_margin_loss", "multilabel_margin_loss", "upsample_bilinear", "upsample_nearest",
]


# ===================================================================== normalisation

def rms_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x^2 over the trailing `normalized_shape` dims) + eps), times weight.

    As torch: float16 input is normalised and weighted in float32 and rounded once to the
    input's dtype (the result has the input's dtype whatever the weight's); eps=None means
    the machine epsilon of that compute type (float32's for float16 input, float64's for
    float64)."""
    op = "rms_norm"
    _tensor(op, "input", input)
    normalized_shape = _normalized_shape(op, input, normalized_shape)
    k = len(normalized_shape)
    if weight is not None and weight.shape != normalized_shape:
        raise ValueError(f"rms_norm: weight has shape {weight.shape}, expected {normalized_shape}")
    compute = _dtypes.float64 if input.dtype is _dtypes.float64 else float32
    if eps is None:
        eps = float(np.finfo(np.float64 if compute is _dtypes.float64 else np.float32).eps)
    x = input if input.dtype is compute else input.to(compute)
    dims = tuple(range(input.ndim - k, input.ndim))
    out = x * ((x * x).mean(dims, keepdim=True) + float(eps)).rsqrt()
    if weight is not None:
        out = out * (weight if weight.dtype is compute else weight.to(compute))
    return out if out.dtype is input.dtype else out.to(input.dtype)


def local_response_norm(input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0) -> Tensor:
    """x / (k + alpha / size * sum of x^2 over the `size` neighbouring channels)^beta, input
    (N, C, *); the window runs from c - size//2 to c + (size-1)//2, zero outside."""
    op = "local_response_norm"
    _tensor(op, "input", input)
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: expected 3D or higher dimensionality input, got shape {input.shape}")
    if input.numel() == 0:
        return input
    batch, channels = input.shape[:2]
    square = (input * input).reshape(batch, channels, -1).transpose(1, 2)        # (N, L, C)
    padded = pad(square, (size // 2, (size - 1) // 2))                            # (N, L, C + size - 1)
    window = padded[..., 0:channels]
    for shift in range(1, size):
        window = window + padded[..., shift:shift + channels]
    div = window.transpose(1, 2).reshape(input.shape) * (alpha / size) + k
    return input / div ** beta


# ===================================================================== in-place activations

def relu_(input: Tensor) -> Tensor:
    return input.copy_(relu(input))


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return input.copy_(elu(input, alpha))


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return input.copy_(leaky_relu(input, negative_slope))


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return input.copy_(hardtanh(input, min_val, max_val))


def selu_(input: Tensor) -> Tensor:
    return input.copy_(selu(input))


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return input.copy_(celu(input, alpha))


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    return input.copy_(_threshold(input, threshold, value))


# ===================================================================== shrinkage, shuffles

def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x - lambd where x > lambd, x + lambd where x < -lambd, 0 elsewhere (NaN kept)."""
    _tensor("softshrink", "input", input)
    if lambd < 0:
        raise ValueError(f"softshrink: lambda must be greater or equal to 0, got {lambd}")
    return input - input.clamp(-float(lambd), float(lambd))  # (NaN - NaN stays NaN; clamp keeps the dtype)


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x where |x| > lambd, 0 elsewhere."""
    return _tensor("hardshrink", "input", input).hardshrink(lambd)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """(N, C, *) with its channels regrouped: channel g*(C/groups) + i moves to i*groups + g."""
    op = "channel_shuffle"
    _tensor(op, "input", input, dtype=None)
    if input.ndim < 3:
        raise ValueError(f"channel_shuffle: expected input of at least 3 dims (N, C, *), got shape {input.shape}")
    channels = input.shape[1]
    if groups <= 0 or channels % groups:
        raise ValueError(f"channel_shuffle: number of channels must be divisible by groups, got {channels} "
                         f"channels and {groups} groups")
    batch, rest = input.shape[0], input.shape[2:]
    grouped = input.reshape(batch, groups, channels // groups, *rest)
    return grouped.transpose(1, 2).reshape(input.shape)


# ===================================================================== resampling

def _output_sizes(op: str, spatial, size, scale_factor) -> tuple[int, ...]:
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    if size is not None:
        sizes = (size,) * len(spatial) if isinstance(size, (int, np.integer)) else tuple(size)
    else:
        factors = (scale_factor,) * len(spatial) if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        sizes = tuple(math.floor(s * float(f)) for s, f in zip(spatial, factors))
    if len(sizes) != len(spatial) or min(sizes) < 1:
        raise ValueError(f"{op}: output size {sizes} must give {len(spatial)} positive sizes")
    return tuple(int(s) for s in sizes)


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Bilinear resize of (N, C, H, W) with align_corners=True (torch's upsample_bilinear):
    output pixel i reads input position i * (in - 1) / (out - 1), per axis."""
    op = "upsample_bilinear"
    _tensor(op, "input", input, ndims=(4,))
    out = input
    for dim, (in_size, out_size) in zip((2, 3), zip(input.shape[2:], _output_sizes(op, input.shape[2:], size,
                                                                                    scale_factor))):
        scale = (in_size - 1) / (out_size - 1) if out_size > 1 else 0.0
        position = np.arange(out_size) * scale
        low = np.minimum(np.floor(position).astype(np.int64), in_size - 1)
        high = np.minimum(low + 1, in_size - 1)
        frac = (position - low).astype(np.float32).reshape((-1,) + (1,) * (3 - dim))
        lerp = tensor(frac, dtype=input.dtype)
        out = out.index_select(dim, tensor(low)) * (1.0 - lerp) + out.index_select(dim, tensor(high)) * lerp
    return out


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """interpolate(input, size, scale_factor, mode='nearest')."""
    return interpolate(input, size, scale_factor, mode="nearest")


# ===================================================================== dropout

_SELU_ALPHA_SCALE = 1.7580993408473766  # selu's alpha * scale: the value a dropped unit takes, negated


def _alpha_dropout(op: str, input: Tensor, p: float, training: bool, feature: bool) -> Tensor:
    """torch's alpha dropout: dropped units become -alpha*scale, then an affine map a*x + b
    keeps mean 0 and variance 1 of SELU activations. The mask comes from anygpu's generator."""
    _tensor(op, "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: dropout probability has to be between 0 and 1, but got {p}")
    if feature and input.ndim < 2:
        raise ValueError(f"{op}: feature dropout requires at least 2 dimensions in the input, got shape "
                         f"{input.shape}")
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input * 0.0
    mask_shape = input.shape[:2] + (1,) * (input.ndim - 2) if feature else input.shape
    keep = (default_generator().random(mask_shape) >= p).astype(np.float32)
    a = 1.0 / math.sqrt((_SELU_ALPHA_SCALE ** 2 * p + 1) * (1 - p))
    shift = (keep - 1.0) * (_SELU_ALPHA_SCALE * a) + _SELU_ALPHA_SCALE * a * p
    dtype = input.dtype
    return input * tensor((keep * a).astype(np.float32), dtype=dtype) + tensor(shift.astype(np.float32), dtype=dtype)


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Alpha dropout (for SELU networks) of each element; the identity when not training."""
    return _alpha_dropout("alpha_dropout", input, p, training, feature=False)


def feature_alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False) -> Tensor:
    """Alpha dropout of whole channels of (N, C, *): one draw per (N, C)."""
    return _alpha_dropout("feature_alpha_dropout", input, p, training, feature=True)


# ===================================================================== distances and pooling

def pdist(input: Tensor, p: float = 2.0) -> Tensor:
    """The p-norm distance between every pair of rows i < j of input (N, M): (N*(N-1)/2,),
    in the order of the upper triangle read row by row."""
    op = "pdist"
    _tensor(op, "input", input, ndims=(2,))
    if p < 0:
        raise ValueError(f"pdist: only supports non-negative p values, got {p}")
    rows = input.shape[0]
    first, second = np.triu_indices(rows, 1)
    if first.size == 0:
        return zeros(0, dtype=input.dtype)
    diff = input.index_select(0, tensor(first.astype(np.int64))) - input.index_select(0, tensor(second.astype(np.int64)))
    return diff.norm(p, 1)


def lp_pool1d(input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """(sum over each window of x^p)^(1/p) of input (N, C, L) or (C, L)."""
    kernel = _one("lp_pool1d", "kernel_size", kernel_size, 1)
    out = avg_pool1d(input.pow(norm_type), kernel, stride, 0, ceil_mode)
    return (out.sign() * relu(out.abs())).mul(kernel).pow(1.0 / norm_type)


def lp_pool2d(input: Tensor, norm_type: float, kernel_size, stride=None, ceil_mode: bool = False) -> Tensor:
    """(sum over each window of x^p)^(1/p) of input (N, C, H, W) or (C, H, W)."""
    kh, kw = _pair("lp_pool2d", "kernel_size", kernel_size, 1)
    out = avg_pool2d(input.pow(norm_type), (kh, kw), stride, 0, ceil_mode)
    return (out.sign() * relu(out.abs())).mul(kh * kw).pow(1.0 / norm_type)


def max_pool1d_with_indices(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
                            return_indices: bool = False):
    """max_pool1d's values and int64 indices (positions in L)."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def max_pool2d_with_indices(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
                            return_indices: bool = False):
    """max_pool2d's values and int64 indices (flat positions h*W + w in each plane)."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)


def _unpool_size(op: str, spatial, kernel, stride, padding, output_size) -> tuple[int, ...]:
    default = tuple((s - 1) * st - 2 * pd + k for s, k, st, pd in zip(spatial, kernel, stride, padding))
    if output_size is None:
        return default
    sizes = (output_size,) if isinstance(output_size, (int, np.integer)) else tuple(output_size)
    sizes = tuple(int(s) for s in sizes[len(sizes) - len(spatial):])
    if len(sizes) != len(spatial):
        raise ValueError(f"{op}: output_size {output_size} should have {len(spatial)} spatial sizes")
    for size, low, st in zip(sizes, default, stride):
        if not low - st < size < low + st:
            raise ValueError(f"{op}: invalid output_size {output_size} (dim sizes must be between "
                             f"{tuple(d - s + 1 for d, s in zip(default, stride))} and "
                             f"{tuple(d + s - 1 for d, s in zip(default, stride))})")
    return sizes


def _max_unpool(op: str, input: Tensor, indices: Tensor, kernel, stride, padding, output_size, dims: int) -> Tensor:
    _tensor(op, "input", input, ndims=(dims + 1, dims + 2))
    _tensor(op, "indices", indices, dtype=int64)
    if indices.shape != input.shape:
        raise ValueError(f"{op}: indices has shape {indices.shape}, expected the input's shape {input.shape}")
    spatial = input.shape[input.ndim - dims:]
    out_sizes = _unpool_size(op, spatial, kernel, stride, padding, output_size)
    lead = input.shape[:input.ndim - dims]
    plane = int(np.prod(out_sizes))
    flat_in = input.reshape(*lead, -1)
    flat_idx = indices.reshape(*lead, -1)
    bad = (flat_idx < 0) | (flat_idx >= plane)
    if flat_idx.numel() and bool(bad.any().item()):
        raise ValueError(f"{op}: found an invalid max index (outside an output of size {out_sizes})")
    out = zeros(*lead, plane, dtype=input.dtype).scatter(len(lead), flat_idx, flat_in)
    return out.reshape(*lead, *out_sizes)


def max_unpool1d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """The inverse of max_pool1d: (N, C, L_in) values put back at their indices in zeros
    (N, C, L_out), L_out = (L_in - 1) * stride - 2 * padding + kernel_size or output_size."""
    op = "max_unpool1d"
    kernel = _one(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None else _one(op, "stride", stride, 1)
    return _max_unpool(op, input, indices, (kernel,), (stride,), (_one(op, "padding", padding, 0),), output_size, 1)


def max_unpool2d(input: Tensor, indices: Tensor, kernel_size, stride=None, padding=0, output_size=None) -> Tensor:
    """The inverse of max_pool2d: (N, C, H_in, W_in) values put back at their flat indices
    h*W_out + w in zeros (N, C, H_out, W_out)."""
    op = "max_unpool2d"
    kernel = _pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None else _pair(op, "stride", stride, 1)
    return _max_unpool(op, input, indices, kernel, stride, _pair(op, "padding", padding, 0), output_size, 2)


# ===================================================================== margin losses

def multi_margin_loss(input: Tensor, target: Tensor, p: int = 1, margin: float = 1.0, weight: Tensor | None = None,
                      size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """sum over i != y of max(0, margin - x[y] + x[i])^p / C per sample, input (N, C) or (C,),
    target (N,) or () class indices; weight (C,) scales each sample's terms by weight[y]."""
    op = "multi_margin_loss"
    reduction = _reduction(op, reduction, size_average, reduce)
    _tensor(op, "input", input, ndims=(1, 2))
    _tensor(op, "target", target, dtype=int64)
    if p not in (1, 2):
        raise ValueError(f"multi_margin_loss: only p == 1 and p == 2 supported, got {p}")
    unbatched = input.ndim == 1
    x = input.unsqueeze(0) if unbatched else input
    rows, classes = x.shape
    y = target.reshape(-1)
    if y.shape[0] != rows:
        raise ValueError(f"multi_margin_loss: target has shape {target.shape}, expected ({rows},)")
    host_y = y.numpy()
    if rows and (host_y.min() < 0 or host_y.max() >= classes):
        raise ValueError(f"multi_margin_loss: target values must be in [0, {classes}), got {host_y.tolist()}")
    x_target = x.gather(1, y.reshape(rows, 1))
    terms = (x - x_target + float(margin)).clamp(min=0.0)
    if p == 2:
        terms = terms * terms
    if weight is not None:
        terms = terms * weight.index_select(0, y).reshape(rows, 1)
    own = np.zeros((rows, classes), bool)
    own[np.arange(rows), host_y] = True
    loss = where(tensor(own), 0.0, terms).sum(1) * (1.0 / classes)
    if unbatched:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


def multilabel_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
                           reduction: str = "mean") -> Tensor:
    """sum over target classes j and non-target classes i of max(0, 1 - (x[j] - x[i])) / C,
    input (N, C) or (C,); target the same shape, class indices ended by the first -1."""
    op = "multilabel_margin_loss"
    reduction = _reduction(op, reduction, size_average, reduce)
    _tensor(op, "input", input, ndims=(1, 2))
    _tensor(op, "target", target, dtype=int64)
    if target.shape != input.shape:
        raise ValueError(f"multilabel_margin_loss: target has shape {target.shape}, expected {input.shape}")
    unbatched = input.ndim == 1
    x = input.unsqueeze(0) if unbatched else input
    rows, classes = x.shape
    labels = target.reshape(rows, classes).numpy()
    count = np.zeros((rows, classes), np.float32)   # how often class j is listed before the first -1
    for row, listed in enumerate(labels):
        for label in listed:
            if label < 0:
                break
            if label >= classes:
                raise ValueError(f"multilabel_margin_loss: target value {label} is out of range for {classes} classes")
            count[row, label] += 1.0
    pairs = count[:, :, None] * (count[:, None, :] == 0)                          # (N, j, i)
    hinge = (x.unsqueeze(1) - x.unsqueeze(2) + 1.0).clamp(min=0.0)                 # 1 - x[j] + x[i]
    loss = (hinge * tensor(pairs, dtype=x.dtype)).sum((1, 2)) * (1.0 / classes)
    if unbatched:
        loss = loss.reshape(())
    return _reduce(loss, reduction)

