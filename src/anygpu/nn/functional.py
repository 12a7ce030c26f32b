"""torch.nn.functional on anygpu tensors: the same names, argument order and defaults.

Each function checks its arguments first (ValueError naming the function, with the
expected and the actual shapes), then either launches fused Layer-0 kernels and
records, right beside them, the backward that routes the gradient (`_record`), or
composes Tensor ops, whose backward comes with them.

Images are NCHW. Integer tensors (class indices, token ids, boolean masks) are int32.
"""

from __future__ import annotations

import functools
import math
import os
import weakref
from typing import Sequence

import numpy as np

from .. import amp
from .. import dtypes as _dtypes
from ..autograd.rules import backward as rule
from ..ops import conv_sgmat, flash_attention, flash_sgmat, gpu
from ..ops._common import check_pair
from ..ops.conv import conv_output_size, conv_transpose_output_size
from ..ops.lossfn import MEAN_ROWS
from ..ops.nd import broadcast_shapes, contiguous_strides, numel
from ..runtime import GpuError
from ..tensor import linked_empty, zeros
from ..tensor import (
    StridedView, Tensor, _record, default_generator, float16, float32, int32, int64, is_grad_enabled, matmul,
    no_grad, ones, tensor, unary_op, where,
)
from ..tensor import log_softmax as _log_softmax
from ..tensor import softmax as _softmax
from ..tensor.elementwise import _autocast_cast

__all__ = [
    "linear", "conv2d", "conv_transpose2d", "group_norm", "layer_norm", "batch_norm", "softmax",
    "log_softmax", "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "binary_cross_entropy_with_logits",
    "binary_cross_entropy", "smooth_l1_loss", "huber_loss", "kl_div",
    "hardtanh", "relu6", "logsigmoid", "mish", "dropout1d", "dropout2d",
    "conv1d", "max_pool1d", "avg_pool1d",
    "selu", "celu", "glu", "hardsigmoid", "hardswish", "softsign", "tanhshrink", "softmin", "threshold", "prelu",
    "cosine_similarity", "pairwise_distance", "margin_ranking_loss", "soft_margin_loss", "hinge_embedding_loss",
    "cosine_embedding_loss", "triplet_margin_loss", "poisson_nll_loss", "gaussian_nll_loss",
    "multilabel_soft_margin_loss",
    "scaled_dot_product_attention", "interpolate", "relu", "silu", "gelu", "sigmoid", "tanh", "leaky_relu",
    "elu", "softplus", "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "dropout", "embedding", "pad",
    "one_hot", "normalize", "affine_grid", "grid_sample",
]

_REDUCTIONS = ("none", "mean", "sum")


# ===================================================================== argument checks

def _tensor(op: str, name: str, value, min_ndim: int = 0, ndims: Sequence[int] | None = None,
            dtype: str | None = float32) -> Tensor:
    """`value` if it is a Tensor of an accepted rank and dtype, else a clear error. float32
    means a float tensor: float16 reaches an op only where _half_or_autocast lets it
    (_HALF_NATIVE, linear), the rest get float32 copies."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor, got {type(value).__name__}")
    if ndims is not None and value.ndim not in ndims:
        expected = " or ".join(f"{n}-D" for n in ndims)
        raise ValueError(f"{op}: {name} must be {expected}, got shape {value.shape}")
    if value.ndim < min_ndim:
        raise ValueError(f"{op}: {name} needs at least {min_ndim} dims, got shape {value.shape}")
    if dtype is float32 and (value.dtype is float16 or value.dtype is _dtypes.float64):
        return value  # (float64 runs every op in numpy: ops/host64)
    if dtype is not None and value.dtype != dtype and (dtype.is_floating_point or value.dtype not in (int32, int64)):
        kind = "a float" if dtype == float32 else "an integer"
        raise ValueError(f"{op}: {name} must be {kind} tensor, got dtype {value.dtype}")
    return value


def _same_float_width(op: str, *operands) -> None:
    """torch's refusal (a ValueError here) of float64 operands mixed with float32/float16 ones in a product
    ("mat1 and mat2 must have the same dtype"): nothing is promoted there."""
    kinds = {t.dtype for t in operands if t is not None}
    if _dtypes.float64 in kinds and len(kinds) > 1:
        names = " and ".join(sorted(_TORCH_NAMES.get(k.name, k.name) for k in kinds))
        raise ValueError(f"{op}: expected all operands to have the same dtype, but got {names} "
                           f"(convert with .double() or .float())")


_TORCH_NAMES = {"float64": "Double", "float32": "Float", "float16": "Half"}


def _optional(op: str, name: str, value, shape, dtype=float32) -> Tensor | None:
    """None, or a float Tensor (of `dtype`) of exactly `shape`."""
    if value is None:
        return None
    _tensor(op, name, value, dtype=dtype)
    if value.shape != tuple(shape):
        raise ValueError(f"{op}: {name} has shape {value.shape}, expected {tuple(shape)}")
    return value


_pair = check_pair  # the one pair helper (ops/_common.py)


def _reduction(op: str, reduction: str, size_average=None, reduce=None) -> str:
    if size_average is not None or reduce is not None:  # torch's deprecated pair of flags
        reduction = "none" if reduce is False else ("sum" if size_average is False else "mean")
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    return reduction


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    return loss


def _needs(*tensors) -> tuple[bool, ...]:
    return tuple(t is not None and t.requires_grad for t in tensors)


def _record_with(name: str, out: Tensor, inputs, backward) -> Tensor:
    """_record over the inputs that are Tensors; `backward` returns one gradient per
    entry of `inputs` (None entries included), the Nones are dropped here."""
    present = [i for i, t in enumerate(inputs) if t is not None]

    def routed(g):
        grads = backward(g)
        return tuple(grads[i] for i in present)

    return _record(name, out, tuple(inputs[i] for i in present), routed)


def _batched(op: str, input: Tensor, spatial_dims: int) -> tuple[Tensor, bool]:
    """(N, C, *spatial) view of an input that may lack the batch dim: (tensor, was_unbatched)."""
    if input.ndim == spatial_dims + 1:
        return input.unsqueeze(0), True
    if input.ndim != spatial_dims + 2:
        raise ValueError(f"{op}: expected a {spatial_dims + 1}-D or {spatial_dims + 2}-D input "
                         f"(C, H, W) or (N, C, H, W), got shape {input.shape}")
    return input, False


# ===================================================================== linear and convolutions

def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y = input @ weight.T + bias: input (*, in_features), weight (out_features, in_features),
    bias (out_features) -> (*, out_features). One matmul reading weight transposed in place,
    adding the bias as it stores."""
    return _linear(input, weight, bias, float32)


def _linear(input: Tensor, weight: Tensor, bias: Tensor | None, dtype) -> Tensor:
    """linear on operands of one float dtype (float32; float16: an f16 product, summed in f32,
    on matrix units where the device has them), the bias added in the product's store."""
    op = "linear"
    _tensor(op, "input", input, min_ndim=1, dtype=dtype)
    _tensor(op, "weight", weight, ndims=(2,), dtype=dtype)
    out_f, in_f = weight.shape
    if input.shape[-1] != in_f:
        raise ValueError(f"linear: input has {input.shape[-1]} features in its last dim (shape {input.shape}), "
                         f"but weight of shape {weight.shape} expects in_features = {in_f}")
    _optional(op, "bias", bias, (out_f,), dtype)
    _same_float_width(op, input, weight, bias)
    rows = numel(input.shape[:-1])
    out_shape = input.shape[:-1] + (out_f,)
    dev = gpu()
    if rows == 0 or in_f == 0 or out_f == 0:  # empty product: zeros (+ bias) as torch, kept in the graph
        out = zeros(out_shape) if bias is None or rows == 0 or out_f == 0 else zeros(out_shape) + bias
        return linked_empty(out, input, weight, bias)
    # The bias is added in the product's store (and a following activation joins it there:
    # ops/fusion.py); the product waits for it.
    x_buf, w_buf = input._buf, weight._buf  # (read once: a strided view gathers on each read)
    buf = dev.matmul_strided(x_buf, w_buf, 1, rows, out_f, in_f, trans_b=True, op=op,
                             bias=None if bias is None else bias._buf)
    out = Tensor(buf, out_shape)
    backward = rule("linear", dev, x_buf, w_buf, rows, in_f, out_f, needs=_needs(input, weight, bias))
    return _record_with(op, out, (input, weight, bias), backward)


def _conv_padding(op: str, padding, kh: int, kw: int, stride, dilation):
    """Numeric (ph, pw) padding plus the extra (bottom, right) zero rows 'same' needs when
    its total padding is odd (torch puts the odd one on the far side)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding != "same":
            raise ValueError(f"{op}: padding must be an int, a pair, 'same' or 'valid', got {padding!r}")
        if stride != (1, 1):
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions (stride {stride})")
        total = (dilation[0] * (kh - 1), dilation[1] * (kw - 1))
        return (total[0] // 2, total[1] // 2), (total[0] % 2, total[1] % 2)
    return _pair(op, "padding", padding, 0), (0, 0)


def _empty_batch(fn, input: Tensor, linked, *args, **kwargs):
    """fn on a batch of 0 samples (input (0, ...)): torch returns an empty batch. Its shape
    comes from one zero sample (checking every argument on the way); the result stays in
    the graph, so input and parameters get zero gradients as torch's."""
    with no_grad():
        probe = fn(zeros((1,) + tuple(input.shape[1:])), *args, **kwargs)
    parts = probe if isinstance(probe, tuple) else (probe,)
    empty = tuple(linked_empty(zeros((0,) + tuple(p.shape[1:]), dtype=p.dtype), input, *linked)
                  if p.dtype.is_floating_point else zeros((0,) + tuple(p.shape[1:]), dtype=p.dtype) for p in parts)
    return empty if isinstance(probe, tuple) else empty[0]


def _conv_operands(op: str, input: Tensor, weight: Tensor, groups) -> tuple[Tensor, bool]:
    """The Tensor-level checks of conv2d and conv_transpose2d: input and a 4-D weight are
    Tensors, groups a positive int; returns the batched input and whether it was unbatched."""
    _tensor(op, "input", input)
    _tensor(op, "weight", weight, ndims=(4,))
    batched = _batched(op, input, 2)
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive integer, got {groups!r}")
    return batched


def conv2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation): input (N, C_in, H, W) or (C_in, H, W),
    weight (C_out, C_in/groups, kH, kW), bias (C_out) -> (N, C_out, H_out, W_out).
    padding: int, (ph, pw), 'valid' or 'same' (stride 1)."""
    op = "conv2d"
    if isinstance(input, Tensor) and input.ndim == 4 and input.shape[0] == 0:
        return _empty_batch(conv2d, input, (weight, bias), weight, bias, stride, padding, dilation, groups)
    x, unbatched = _conv_operands(op, input, weight, groups)
    out_c, in_c_per_group, kh, kw = weight.shape
    batch, in_c, in_h, in_w = x.shape
    if in_c != in_c_per_group * groups:
        raise ValueError(f"conv2d: input has {in_c} channels (shape {input.shape}), but weight of shape "
                         f"{weight.shape} with groups={groups} expects {in_c_per_group * groups} "
                         f"= weight.shape[1] * groups")
    if out_c % groups:
        raise ValueError(f"conv2d: weight has {out_c} output channels (shape {weight.shape}), "
                         f"not divisible by groups={groups}")
    _optional(op, "bias", bias, (out_c,))
    stride = _pair(op, "stride", stride, 1)
    dilation = _pair(op, "dilation", dilation, 1)
    padding, extra = _conv_padding(op, padding, kh, kw, stride, dilation)
    if extra != (0, 0):
        x = pad(x, (0, extra[1], 0, extra[0]))
        batch, in_c, in_h, in_w = x.shape
    dev = gpu()
    out_h = conv_output_size(in_h, kh, stride[0], padding[0], dilation[0])
    out_w = conv_output_size(in_w, kw, stride[1], padding[1], dilation[1])
    if out_h < 1 or out_w < 1:
        raise ValueError(f"conv2d: input of spatial size {(in_h, in_w)} with padding {padding} is too small for "
                         f"a {kh}x{kw} kernel with dilation {dilation} (output would be {out_h}x{out_w})")
    buf = dev.conv2d(x._buf, weight._buf, None if bias is None else bias._buf, batch, in_c, in_h, in_w, out_c,
                     kh, kw, stride, padding, dilation, groups)
    out = Tensor(buf, (batch, out_c, out_h, out_w))
    needs = _needs(x, weight, bias)

    backward = rule("conv2d", dev, x._buf, weight._buf, batch, in_c, in_h, in_w, out_c, kh, kw,
                    stride, padding, dilation, groups, needs=needs)

    out = _record_with(op, out, (x, weight, bias), backward)
    return out.squeeze(0) if unbatched else out


def conv_transpose2d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 2-D convolution: input (N, C_in, H, W) or (C_in, H, W),
    weight (C_in, C_out/groups, kH, kW), bias (C_out) -> (N, C_out, H_out, W_out),
    H_out = (H - 1)*stride - 2*padding + dilation*(kH - 1) + output_padding + 1."""
    op = "conv_transpose2d"
    if isinstance(input, Tensor) and input.ndim == 4 and input.shape[0] == 0:
        return _empty_batch(conv_transpose2d, input, (weight, bias), weight, bias, stride, padding,
                            output_padding, groups, dilation)
    x, unbatched = _conv_operands(op, input, weight, groups)
    w_in_c, out_c_per_group, kh, kw = weight.shape
    batch, in_c, in_h, in_w = x.shape
    if in_c != w_in_c:
        raise ValueError(f"conv_transpose2d: input has {in_c} channels (shape {input.shape}), but weight of "
                         f"shape {weight.shape} expects weight.shape[0] = {w_in_c}")
    if in_c % groups:
        raise ValueError(f"conv_transpose2d: input channels {in_c} are not divisible by groups={groups}")
    out_c = out_c_per_group * groups
    _optional(op, "bias", bias, (out_c,))
    stride = _pair(op, "stride", stride, 1)
    padding = _pair(op, "padding", padding, 0)
    output_padding = _pair(op, "output_padding", output_padding, 0)
    dilation = _pair(op, "dilation", dilation, 1)
    dev = gpu()
    buf = dev.conv_transpose2d(x._buf, weight._buf, None if bias is None else bias._buf, batch, in_c, in_h, in_w,
                               out_c, kh, kw, stride, padding, output_padding, dilation, groups)
    out_h, out_w = (conv_transpose_output_size(size, k, s, p, o, d) for size, k, s, p, o, d in
                    zip((in_h, in_w), (kh, kw), stride, padding, output_padding, dilation))
    out = Tensor(buf, (batch, out_c, out_h, out_w))
    needs = _needs(x, weight, bias)

    backward = rule("conv_transpose2d", dev, x._buf, weight._buf, batch, in_c, in_h, in_w, out_c, kh, kw,
                    stride, padding, output_padding, dilation, groups, needs=needs)

    out = _record_with(op, out, (x, weight, bias), backward)
    return out.squeeze(0) if unbatched else out


# ===================================================================== normalisation

def group_norm(input: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Group normalisation: input (N, C, *), statistics per (sample, group of C/num_groups
    channels); weight, bias (C) -> same shape as input."""
    op = "group_norm"
    _tensor(op, "input", input, min_ndim=2)
    batch, channels = input.shape[:2]
    if not isinstance(num_groups, int) or num_groups < 1 or channels % num_groups:
        raise ValueError(f"group_norm: input has {channels} channels (shape {input.shape}), "
                         f"not divisible by num_groups={num_groups!r}")
    _optional(op, "weight", weight, (channels,))
    _optional(op, "bias", bias, (channels,))
    spatial = numel(input.shape[2:])
    if input.numel() == 0:
        return input.clone()
    dev = gpu()
    gamma = weight._buf if weight is not None else ones(channels)._buf
    beta = bias._buf if bias is not None else dev.alloc(channels)
    x_buf = input._buf  # (read once: a strided view gathers on each read)
    out = Tensor(dev.group_norm(x_buf, gamma, beta, batch, channels, spatial, num_groups, float(eps)),
                 input.shape)
    needs = _needs(input, weight, bias)

    backward = rule("group_norm", dev, x_buf, gamma, batch, channels, spatial, num_groups, float(eps),
                    needs=needs)

    return _record_with(op, out, (input, weight, bias), backward)


def _normalized_shape(op: str, input: Tensor, normalized_shape) -> tuple:
    """normalized_shape (an int or a sequence) as a tuple, which input's shape must end with."""
    if isinstance(normalized_shape, (int, np.integer)):
        normalized_shape = (int(normalized_shape),)
    normalized_shape = tuple(int(s) for s in normalized_shape)
    k = len(normalized_shape)
    if k == 0 or k > input.ndim or input.shape[input.ndim - k:] != normalized_shape:
        raise ValueError(f"{op}: input of shape {input.shape} does not end with normalized_shape {normalized_shape}")
    return normalized_shape


def layer_norm(input: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Layer normalisation over the trailing dims `normalized_shape`; weight and bias
    have that shape. One fused kernel per direction (ops/layernorm.py)."""
    op = "layer_norm"
    _tensor(op, "input", input)
    normalized_shape = _normalized_shape(op, input, normalized_shape)
    _optional(op, "weight", weight, normalized_shape)
    _optional(op, "bias", bias, normalized_shape)
    cols = numel(normalized_shape)
    rows = input.numel() // cols if cols else 0
    if rows == 0 or cols == 0:
        return input.clone()
    dev = gpu()
    gamma = weight._buf if weight is not None else None
    x_buf = input._buf  # (read once: a strided view gathers on each read)
    y, stats = dev.layer_norm(x_buf, gamma, None if bias is None else bias._buf, rows, cols, float(eps))
    out = Tensor(y, input.shape)
    backward = rule("layer_norm", dev, x_buf, gamma, stats, rows, cols, needs=_needs(input, weight, bias))

    return _record_with(op, out, (input, weight, bias), backward)


def batch_norm(input: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation per channel C = input.shape[1] of (N, C), (N, C, L) or (N, C, H, W).
    Training normalises with the batch's mean and biased variance and updates running_mean /
    running_var in place (unbiased variance, as torch); evaluation uses the running statistics.
    Fused kernels (ops/batchnorm.py): two launches forward, two backward."""
    op = "batch_norm"
    _tensor(op, "input", input, min_ndim=2)
    channels = input.shape[1]
    for name, value in (("running_mean", running_mean), ("running_var", running_var), ("weight", weight),
                        ("bias", bias)):
        _optional(op, name, value, (channels,))
    if not training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm: running_mean and running_var are required when training=False")
    batch, spatial = input.shape[0], numel(input.shape[2:])
    if training and batch * spatial == 1:
        raise ValueError(f"batch_norm: expected more than 1 value per channel when training, "
                         f"got input of shape {input.shape}")
    if input.numel() == 0:  # an empty result; weight and bias stay in the graph (zero gradients)
        out = input.clone()
        broadcast = (1, channels) + (1,) * (input.ndim - 2)
        if weight is not None:
            out = out * weight.reshape(broadcast)
        if bias is not None:
            out = out + bias.reshape(broadcast)
        return out
    dev = gpu()
    track = training and running_mean is not None and running_var is not None
    if track and momentum is None:
        raise ValueError("batch_norm: momentum=None (a cumulative average) needs the module's "
                         "num_batches_tracked; pass a float momentum")
    if training:
        mean, variance = dev.batch_norm_stats(input._buf, batch, channels, spatial,
                                              running_mean._buf if track else None,
                                              running_var._buf if track else None,
                                              0.0 if momentum is None else float(momentum))
        if track:
            running_mean._host = running_var._host = None  # updated in place on the GPU
    else:
        mean, variance = running_mean._buf, running_var._buf
    gamma = None if weight is None else weight._buf
    out = Tensor(dev.batch_norm_apply(input._buf, mean, variance, gamma, None if bias is None else bias._buf,
                                      batch, channels, spatial, float(eps)), input.shape)

    backward = rule("batch_norm", dev, input._buf, mean, variance, gamma, batch, channels, spatial, float(eps),
                    training)

    return _record_with(op, out, (input, weight, bias), backward)


# ===================================================================== softmax and losses

def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along dim (numerically stable; one fused kernel).
    dim=None picks torch's legacy implicit dim (0 for 0-, 1- and 3-D input, else 1)."""
    _tensor("softmax", "input", input, dtype=None)
    x = input if dtype is None else input.to(dtype)
    return _softmax(x, _implicit_softmax_dim(input.ndim) if dim is None else dim)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """x - log(sum(exp(x))) along dim (numerically stable); dim=None as in softmax."""
    _tensor("log_softmax", "input", input, dtype=None)
    x = input if dtype is None else input.to(dtype)
    return _log_softmax(x, _implicit_softmax_dim(input.ndim) if dim is None else dim)


def _implicit_softmax_dim(ndim: int) -> int:
    return 0 if ndim in (0, 1, 3) else 1


def _class_rows(op: str, input: Tensor, target: Tensor):
    """(logits [rows, C], target [rows], output shape of reduction='none') for class-index targets."""
    if input.ndim == 1:
        if target.ndim != 0:
            raise ValueError(f"{op}: input of shape {input.shape} (one sample of C classes) expects a 0-D target, "
                             f"got shape {target.shape}")
        return input.reshape(1, input.shape[0]), target.reshape(1), ()
    expected = (input.shape[0],) + input.shape[2:]
    if target.shape != expected:
        raise ValueError(f"{op}: target has shape {target.shape}, expected {expected} for input of shape "
                         f"{input.shape} (N, C, d1, ...)")
    classes = input.shape[1]
    logits = input if input.ndim == 2 else input.permute(0, *range(2, input.ndim), 1).reshape(-1, classes)
    return logits, target.reshape(-1), expected


def _check_classes(op: str, target: Tensor, classes: int, ignore_index: int) -> None:
    """Class indices outside [0, C) raise here, before any GPU work, when the target keeps
    its host copy (tensors made from numpy or lists do); on the GPU they give NaN."""
    host = target._host
    if host is None or host.size == 0:
        return
    bad = host[(host != ignore_index) & ((host < 0) | (host >= classes))]
    if bad.size:
        raise ValueError(f"{op}: target class index {int(bad.flat[0])} is out of range for {classes} classes "
                         f"(valid: 0..{classes - 1}, or ignore_index={ignore_index})")


# Per device, class count -> a Buffer of ones: the class weights of an unweighted loss, made
# once (a fill kernel per call otherwise; the same buffer keeps a captured step's inputs fixed).
_UNIT_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _unit_weights(dev, classes: int):
    known = _UNIT_WEIGHTS.setdefault(dev, {})
    buf = known.get(classes)
    if buf is None:
        buf = known[classes] = dev.upload(np.ones(classes, np.float32))
    return buf


def _class_loss(op: str, input: Tensor, target: Tensor, weight, ignore_index: int, reduction: str,
                label_smoothing: float, log_probs: bool) -> Tensor:
    """cross_entropy / nll_loss with class-index targets, on the fused row kernel."""
    _tensor(op, "target", target, dtype=int32)
    logits, flat_target, none_shape = _class_rows(op, input, target)
    rows, classes = logits.shape
    _optional(op, "weight", weight, (classes,))
    _check_classes(op, target, classes, ignore_index)
    dev = gpu()
    if rows == 0:  # torch's values (empty, 0 sum, NaN mean), still linked to input for backward
        if reduction == "none":
            return input.reshape(none_shape)
        linked = input.sum() * 0.0
        return linked if reduction == "sum" else linked + math.nan
    weight_buf = weight._buf if weight is not None else _unit_weights(dev, classes)
    if reduction == "mean" and not label_smoothing and rows <= MEAN_ROWS:
        # The common training loss: rows and their weighted mean in two kernels, the backward
        # in one (the general path below takes five and four).
        loss_buf, stats = dev.cross_entropy_mean(logits._buf, flat_target._buf, weight_buf, rows, classes,
                                                 ignore_index, log_probs)
        return _record(op, Tensor(loss_buf, ()), (logits,),
                       rule("cross_entropy_mean", dev, logits._buf, flat_target._buf, weight_buf, stats, rows,
                            classes, ignore_index, log_probs))
    parts_buf, stats, row_weight = dev.cross_entropy_rows(logits._buf, flat_target._buf, weight_buf, rows, classes,
                                                          ignore_index, log_probs)
    parts = Tensor(parts_buf, (2, rows))

    parts = _record(op, parts, (logits,), rule("cross_entropy_rows", dev, logits._buf, flat_target._buf, weight_buf,
                                                stats, rows, classes, ignore_index, log_probs))
    nll = parts[0]
    smooth = parts[1] if label_smoothing else None
    if reduction == "none":
        loss = nll if smooth is None else nll * (1.0 - label_smoothing) + smooth * (label_smoothing / classes)
        return loss.reshape(none_shape)
    if reduction == "sum":
        loss = nll.sum()
        return loss if smooth is None else loss * (1.0 - label_smoothing) + smooth.sum() * (label_smoothing / classes)
    # Both terms are divided by the sum of w[target] over the rows not ignored (their count
    # without a weight), as torch does.
    total_weight = Tensor(row_weight, (rows,)).sum()
    if smooth is None:
        return nll.sum() / total_weight
    return (nll.sum() * (1.0 - label_smoothing) + smooth.sum() * (label_smoothing / classes)) / total_weight


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
                  ignore_index: int = -100, reduce=None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> Tensor:
    """Cross-entropy of logits input (N, C), (C,) or (N, C, d1, ...) against class indices
    (N), () or (N, d1, ...) (int), or class probabilities of input's shape (float).
    Class indices take one fused log-softmax + NLL kernel (ops/lossfn.py)."""
    op = "cross_entropy"
    _tensor(op, "input", input, min_ndim=1)
    reduction = _reduction(op, reduction, size_average, reduce)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if not isinstance(target, Tensor):
        raise TypeError(f"cross_entropy: target must be a Tensor, got {type(target).__name__}")
    if target.dtype == float32:
        if target.shape != input.shape:
            raise ValueError(f"cross_entropy: float target (class probabilities) has shape {target.shape}, "
                             f"expected the input's shape {input.shape}; class indices must be integers")
        return _soft_cross_entropy(input, target, weight, reduction, label_smoothing)
    return _class_loss(op, input, target, weight, int(ignore_index), reduction, float(label_smoothing),
                       log_probs=False)


def _soft_cross_entropy(input, target, weight, reduction, label_smoothing):
    class_dim = 0 if input.ndim == 1 else 1
    classes = input.shape[class_dim]
    _optional("cross_entropy", "weight", weight, (classes,))
    logp = _log_softmax(input, class_dim)
    if label_smoothing:
        target = target * (1.0 - label_smoothing) + label_smoothing / classes
    if weight is not None:
        logp = logp * weight.reshape((classes,) + (1,) * (input.ndim - class_dim - 1))
    loss = -(logp * target).sum(class_dim)
    return _reduce(loss, reduction)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
             ignore_index: int = -100, reduce=None, reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities input (N, C), (C,) or (N, C, d1, ...)
    against int class indices (N), () or (N, d1, ...)."""
    op = "nll_loss"
    _tensor(op, "input", input, min_ndim=1)
    reduction = _reduction(op, reduction, size_average, reduce)
    return _class_loss(op, input, target, weight, int(ignore_index), reduction, 0.0, log_probs=True)


def mse_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    """Mean squared error; input and target broadcast together (torch warns, we allow)."""
    op = "mse_loss"
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    reduction = _reduction(op, reduction, size_average, reduce)
    broadcast_shapes(op, input.shape, target.shape)
    if reduction == "mean" and input.shape == target.shape and input.numel() > 0:
        dev = gpu()  # one tree-reduction kernel instead of subtract, square and mean
        out = Tensor(dev.mse_loss(input._buf, target._buf), ())
        needs = _needs(input, target)
        return _record(op, out, (input, target),
                       rule("mse_loss", dev, input._buf, target._buf, needs=needs))
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
            weight: Tensor | None = None) -> Tensor:
    """Mean absolute error; input and target broadcast together. With a `weight` of the
    input's shape, 'mean' is sum(w |x - t|) / sum(w), as torch."""
    _tensor("l1_loss", "input", input)
    _tensor("l1_loss", "target", target)
    reduction = _reduction("l1_loss", reduction, size_average, reduce)
    loss = (input - target).abs()
    if weight is None:
        return _reduce(loss, reduction)
    _optional("l1_loss", "weight", weight, input.shape)
    loss = loss * weight
    return loss.sum() / weight.sum() if reduction == "mean" else _reduce(loss, reduction)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,
                                     size_average=None, reduce=None, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid + binary cross-entropy, stable for large |logits|:
    (1 - t) x + (1 + (pw - 1) t) * softplus(-x)."""
    op = "binary_cross_entropy_with_logits"
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    reduction = _reduction(op, reduction, size_average, reduce)
    if target.shape != input.shape:
        raise ValueError(f"{op}: target has shape {target.shape}, expected the input's shape {input.shape}")
    log_weight = 1.0 if pos_weight is None else (pos_weight - 1.0) * target + 1.0
    loss = (1.0 - target) * input + log_weight * softplus(-input)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _same_shape(op: str, input: Tensor, target: Tensor) -> None:
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    if target.shape != input.shape:
        raise ValueError(f"{op}: target has shape {target.shape}, expected the input's shape {input.shape}")


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
                         reduce=None, reduction: str = "mean") -> Tensor:
    """Binary cross-entropy of probabilities input (any shape, values in [0, 1]) against
    target of the same shape: -w (t log x + (1 - t) log(1 - x)), each log clamped at
    -100 as torch does (so x = 0 or 1 gives a finite loss). The input gradient is torch's
    w (x - t) / max(x (1 - x), 1e-12), finite at 0 and 1 too."""
    op = "binary_cross_entropy"
    _same_shape(op, input, target)
    reduction = _reduction(op, reduction, size_average, reduce)
    with no_grad():
        log_x = input.log().clamp(min=-100.0)
        log_1mx = (1.0 - input).log().clamp(min=-100.0)
        loss = -(target * log_x + (1.0 - target) * log_1mx)

    loss = _record(op, loss, (input, target), rule("binary_cross_entropy", gpu(), input._buf, target._buf,
                                                   needs=_needs(input, target)))
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    """0.5 d^2 / beta where |d| < beta, else |d| - 0.5 beta (d = input - target, broadcast
    together); beta = 0 is the L1 loss."""
    op = "smooth_l1_loss"
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    reduction = _reduction(op, reduction, size_average, reduce)
    if beta < 0:
        raise ValueError(f"{op}: beta must be >= 0, got {beta}")
    diff = input - target
    size = diff.abs()
    if beta == 0.0:
        return _reduce(size, reduction)
    return _reduce(where(size < beta, diff * diff * (0.5 / beta), size - 0.5 * beta), reduction)


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0,
               weight: Tensor | None = None) -> Tensor:
    """0.5 d^2 where |d| <= delta, else delta (|d| - 0.5 delta) (d = input - target,
    broadcast together); `weight` (the input's shape) multiplies each term before the reduction."""
    op = "huber_loss"
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    reduction = _reduction(op, reduction)
    if delta <= 0:
        raise ValueError(f"{op}: delta must be > 0, got {delta}")
    diff = input - target
    size = diff.abs()
    loss = where(size <= delta, diff * diff * 0.5, (size - 0.5 * delta) * delta)
    if weight is not None:
        _optional(op, "weight", weight, input.shape)
        loss = loss * weight
    return _reduce(loss, reduction)


def kl_div(input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean",
           log_target: bool = False) -> Tensor:
    """Kullback-Leibler divergence of log-probabilities input from target (probabilities,
    or log-probabilities with log_target=True), broadcast together:
    t (log t - x), 0 where t = 0; or exp(t) (t - x). reduction='batchmean' divides the
    sum by the batch size (input.size(0)), the mathematically proper KL; 'mean' divides
    by the number of elements, as torch."""
    op = "kl_div"
    _tensor(op, "input", input)
    _tensor(op, "target", target)
    if reduction == "batchmean":
        reduction, batchmean = "sum", True
    else:
        batchmean = False
    reduction = _reduction(op, reduction, size_average, reduce)
    if log_target:
        loss = target.exp() * (target - input)
    else:
        positive = target > 0
        # t log t with 0 at t = 0: the log reads 1 there, so no inf or NaN reaches the gradient.
        loss = target * where(positive, target, 1.0).log() - target * input
    loss = _reduce(loss, reduction)
    if batchmean and input.ndim > 0:
        loss = loss * (1.0 / input.shape[0])
    return loss


# ===================================================================== attention

def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> Tensor:
    """softmax(q k^T * scale + mask) v: query (*, L, E), key (*, S, E), value (*, S, Ev)
    -> (*, L, Ev); scale defaults to 1/sqrt(E). attn_mask broadcasts to (*, L, S): an
    integer (boolean) mask keeps positions where it is nonzero, a float mask is added.
    The batched matmuls read k and the probabilities transposed in place; the backward
    is written out (dV = P^T dO, dP = dO V^T, dS = softmax', dQ = dS K, dK = dS^T Q)."""
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        _tensor(op, name, t, min_ndim=2)
    if enable_gqa:
        raise ValueError(f"{op}: enable_gqa is not supported")
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(f"{op}: query of shape {query.shape} and key of shape {key.shape} differ in the "
                         f"embedding dim ({query.shape[-1]} != {key.shape[-1]})")
    if query.shape[-2] == 0 or key.shape[-2] == 0:  # no queries: empty; no keys: zeros, as torch
        batch = broadcast_shapes(op, query.shape[:-2], key.shape[:-2], value.shape[:-2])
        return linked_empty(zeros(batch + (query.shape[-2], value.shape[-1])), query, key, value)
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(f"{op}: key of shape {key.shape} and value of shape {value.shape} differ in the "
                         f"sequence dim ({key.shape[-2]} != {value.shape[-2]})")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{op}: pass either attn_mask or is_causal=True, not both")
    length, embed = query.shape[-2:]
    source, embed_v = value.shape[-2:]
    batch_shape = broadcast_shapes(op, query.shape[:-2], key.shape[:-2], value.shape[:-2])
    q = query if query.shape[:-2] == batch_shape else query.expand(batch_shape + (length, embed))
    k = key if key.shape[:-2] == batch_shape else key.expand(batch_shape + (source, embed))
    v = value if value.shape[:-2] == batch_shape else value.expand(batch_shape + (source, embed_v))
    scores_shape = batch_shape + (length, source)
    # is_causal (torch's: row i keeps columns c <= i, also where length != source) needs no
    # mask tensor: the causal softmax masks as it reads.
    mask = None
    if attn_mask is not None:
        _tensor(op, "attn_mask", attn_mask, dtype=None)
        if broadcast_shapes(op, scores_shape, attn_mask.shape) != scores_shape:
            raise ValueError(f"{op}: attn_mask of shape {attn_mask.shape} does not broadcast to the scores' "
                             f"shape {scores_shape}")
        mask = attn_mask if attn_mask.dtype == float32 else where(attn_mask, 0.0, -math.inf)
    scale = 1.0 / math.sqrt(embed) if scale is None else float(scale)
    batch = numel(batch_shape)
    dev = gpu()
    flash = _flash_attention(q, k, v, attn_mask, mask, is_causal, scores_shape, batch, scale, dropout_p)
    if flash is not None:
        return flash
    # float16 q, k, v (on matrix units, see _half_or_autocast): both products on f16 operands,
    # the scores and softmax in f32, the probabilities rounded to f16 for P V (flash
    # attention's precision); the result is f16.
    half = q.dtype is float16
    if half and mask is not None and mask.dtype is float16:
        mask = mask.float()
    q_buf, k_buf, v_buf = q._buf, k._buf, v._buf  # (read once: a strided view gathers on each read)
    scores = dev.matmul_strided(q_buf, k_buf, batch, length, source, embed, trans_b=True, alpha=scale, op=op,
                                out_dtype="f32" if half else None)
    if is_causal:
        probs = dev.softmax_causal(scores, batch * length, source, length)
    else:
        if mask is not None:
            scores, _ = dev.broadcast_binary("add", scores, scores_shape, mask._buf, mask.shape)
        probs = dev.softmax(scores, batch * length, source)
    seed = None
    kept = probs
    if dropout_p > 0.0:
        seed = int(default_generator().integers(0, 2**63))
        kept = dev.dropout(probs, dropout_p, seed)
    if half:
        kept = dev.cast(kept, "f16")
    out = Tensor(dev.matmul_strided(kept, v_buf, batch, length, embed_v, source, op=op),
                 batch_shape + (length, embed_v))
    backward = rule("attention", dev, q_buf, k_buf, v_buf, probs, kept, batch, length, source, embed, embed_v,
                    scale, dropout_p, seed, mask_shapes=None if mask is None else (scores_shape, mask.shape),
                    causal=is_causal, needs=_needs(q, k, v, mask))
    return _record_with(op, out, (q, k, v, mask), backward)


def _flash_rows(t: Tensor):
    """(buffer, flash_attention.Rows) that the matrix flash kernels read t's [*, n, cols] rows
    through: a strided view's base in place where its rows are contiguous, its batch dims fold
    into at most two strides and everything is in whole 16-byte units; else t gathered."""
    n, cols = t.shape[-2:]
    if t._view is not None and t._base.dtype is t.dtype and cols % 8 == 0:
        strides, offset = t._view
        folded = flash_attention.fold_batch(t.shape[:-2], strides[:-2]) if strides[-1] == 1 or cols == 1 else None
        if folded is not None:
            rows = flash_attention.Rows(*folded, strides[-2] if n > 1 else cols, offset)
            if not any(x % 8 for x in rows[1:]):
                return t._base._buf, rows
    # t._buf of a view gathers it: touched only here, where the view cannot be read in place
    return t._buf, flash_attention.Rows.contiguous(n, cols)


# Ops that make a view of their one operand: its elements, placed in its storage by _view.
_VIEW_OPS = frozenset(("getitem", "reshape", "view", "permute", "expand"))


def _views_of(root: Tensor, views) -> bool:
    """Whether every tensor in `views` comes from `root` through view ops alone, none of them
    (root aside) with hooks or a retained gradient, and none read after root changed in place:
    then root's gradient from them is theirs placed where they lie in root's buffer."""
    for t in views:
        if t._base is not root or t._version != root._version:
            return False
        while t is not root:
            if t._entry is None or t._entry.name not in _VIEW_OPS or len(t._parents) != 1 or t._hooks or t._retain:
                return False
            t = t._parents[0]
    return True


def _heads_inside_rows(q: Tensor, rows, batch_shape, length: int, embed_v: int):
    """Rows for the output in q's order of dims where q is [B, H, T, D] read from a [B, T, H, D]
    layout (nanoGPT's heads: q.view(B, T, H, D).transpose(1, 2)), as torch's flash kernels keep
    it: then out.transpose(1, 2) is contiguous and `.contiguous()` copies nothing. None
    elsewhere (out contiguous)."""
    if len(batch_shape) != 2 or rows is None:
        return None
    heads = batch_shape[1]
    r = rows[0]
    if heads < 2 or r.inner != heads or not r.inner_stride < r.row_stride:
        return None
    return flash_attention.Rows(heads, length * heads * embed_v, embed_v, heads * embed_v, 0)


def _flash_attention(q: Tensor, k: Tensor, v: Tensor, attn_mask, mask, is_causal: bool, scores_shape, batch: int,
                     scale: float, dropout_p: float) -> Tensor | None:
    """SDPA on the flash kernels (ops/flash_attention.py) where they serve this call (their
    `variant`: ANYGPU_FLASH, matrix units), else None. A float mask that wants a gradient
    stays on the composed path (flash never forms dS in memory)."""
    if q.dtype not in (float32, float16) or mask is not None and mask.requires_grad:
        return None
    length, embed = q.shape[-2:]
    source, embed_v = v.shape[-2:]
    dev = gpu()
    kind = flash_attention.variant(dev, "f16" if q.dtype is float16 else "f32", embed, embed_v, batch)
    if kind is None:
        return None
    mask_buf = strides = None
    if attn_mask is not None:
        mask = mask.float() if mask.dtype is not float32 else mask
        strides = flash_attention.mask_strides(mask.shape, scores_shape)
        if strides is None:
            mask = mask.expand(scores_shape)
            strides = flash_attention.mask_strides(scores_shape, scores_shape)
        mask_buf = mask._buf
    seed = int(default_generator().integers(0, 2**63)) if dropout_p > 0.0 else None
    rows = out_rows = None
    root = q._base
    if kind == "matrix":   # strided views (heads split from one product) are read in place
        found = [_flash_rows(t) for t in (q, k, v)]
        rows = tuple(r for _, r in found)
        q_buf, k_buf, v_buf = (buf for buf, _ in found)
        out_rows = _heads_inside_rows(q, rows, scores_shape[:-2], length, embed_v)
        # q, k and v views of one tensor at disjoint places (nanoGPT's split of one [B, T, 3C]
        # product): the backward writes their gradients into one buffer of that tensor's shape,
        # recorded as its gradient, instead of three, each permuted back and scattered into zeros
        # and the three summed.
        shared = (root is not None and root.requires_grad and is_grad_enabled() and root.dtype is q.dtype
                  and q_buf is root._buf and k_buf is root._buf and v_buf is root._buf
                  and flash_attention.disjoint([(rows[0], batch, length, embed), (rows[1], batch, source, embed),
                                                (rows[2], batch, source, embed_v)])
                  and _views_of(root, (q, k, v)))
    else:
        q_buf, k_buf, v_buf = q._buf, k._buf, v._buf
        shared = False
    args = (batch, length, source, embed, embed_v, scale, is_causal, mask_buf, strides, dropout_p, seed, kind)
    try:
        out_buf, lse = dev.flash_attention(q_buf, k_buf, v_buf, *args, rows=rows, out_rows=out_rows)
    except GpuError as exc:
        if kind != "matrix":
            raise
        flash_sgmat.forget(dev, str(exc))
        return None
    mask_input = mask if attn_mask is not None else None
    if out_rows is None:
        out = Tensor(out_buf, scores_shape[:-1] + (embed_v,))
    else:   # [B, H, T, Dv] over a [B, T, H, Dv] buffer
        b, heads = scores_shape[:2]
        out = StridedView(Tensor(out_buf, (b, length, heads, embed_v)), (b, heads, length, embed_v), q.dtype,
                          (length * heads * embed_v, embed_v, heads * embed_v, 1), 0)
    if shared:
        covered = batch * (length * embed + source * (embed + embed_v)) == root.numel()

        def into_backward(grad_out):
            into = dev.empty(root.numel(), q_buf.dtype) if covered else dev.alloc(root.numel(), q_buf.dtype)
            grad = dev.flash_attention_backward(grad_out, q_buf, k_buf, v_buf, out_buf, lse, *args, rows=rows,
                                                out_rows=out_rows, into=into)[0]
            return grad, None
        return _record_with("scaled_dot_product_attention", out, (root, mask_input), into_backward)
    needs = _needs(q, k, v)

    def backward(grad_out):
        grads = dev.flash_attention_backward(grad_out, q_buf, k_buf, v_buf, out_buf, lse, *args, rows=rows,
                                             out_rows=out_rows)
        return tuple(g if need else None for g, need in zip(grads, needs)) + (None,)
    return _record_with("scaled_dot_product_attention", out, (q, k, v, mask_input), backward)


# ===================================================================== resampling and pooling

def _nearest_indices(in_size: int, out_size: int, scale_factor, exact: bool) -> np.ndarray:
    """torch's nearest source index of every output position along one axis (float32 math)."""
    if scale_factor is not None and scale_factor > 0:
        scale = np.float32(1.0 / scale_factor)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    positions = np.arange(out_size, dtype=np.float32)
    if exact:
        positions = positions + np.float32(0.5)
    return np.minimum(np.floor(positions * scale).astype(np.int64), in_size - 1).astype(np.int32)


def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """The sampling grid [N, H, W, 2] of the affine maps theta [N, 2, 3] over the normalized
    (x, y) coordinates of an output of size (N, C, H, W), as torch's 2-D affine_grid
    (align_corners: the corner pixels' centres at +-1, else their outer edges)."""
    op = "affine_grid"
    theta = _tensor(op, "theta", theta, ndims=(3,))
    size = tuple(int(v) for v in size)
    if len(size) != 4 or min(size) < 1:
        raise ValueError(f"{op}: size must be a positive 2-D size (N, C, H, W), got {size}")
    n, _, h, w = size
    if theta.shape != (n, 2, 3):
        raise ValueError(f"{op}: theta of shape {(n, 2, 3)} expected for size {size}, got {theta.shape}")

    def axis(steps: int) -> np.ndarray:
        if steps == 1:  # one pixel sits at the centre, with or without align_corners (torch since 1.3)
            return np.zeros(1)
        points = np.linspace(-1.0, 1.0, steps)
        return points if align_corners else points * (steps - 1) / steps
    xs, ys = np.meshgrid(axis(w), axis(h))
    base = np.stack([xs, ys, np.ones_like(xs)], axis=-1).reshape(1, h * w, 3).astype(np.float32)
    return matmul(tensor(base).expand(n, h * w, 3), theta.transpose(1, 2)).reshape(n, h, w, 2)


def _reflected(coord: Tensor, twice_low: int, twice_high: int) -> Tensor:
    """Coordinates reflected into [twice_low / 2, twice_high / 2] (grid_sample's reflection)."""
    if twice_low == twice_high:
        return coord * 0.0
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    distance = (coord - low).abs()
    extra = distance.remainder(span)
    even = (distance / span).floor().remainder(2) == 0
    return where(even, extra + low, span - extra + low)


def grid_sample(input: Tensor, grid: Tensor, mode: str = "bilinear", padding_mode: str = "zeros",
                align_corners: bool | None = None) -> Tensor:
    """input [N, C, H, W] sampled at grid [N, Ho, Wo, 2] ((x, y) in [-1, 1]) -> [N, C, Ho, Wo], as
    torch's 2-D grid_sample: modes bilinear and nearest (half to even), padding zeros, border
    or reflection. Differentiable in input and (bilinear) grid."""
    op = "grid_sample"
    input = _tensor(op, "input", input, ndims=(4,))
    grid = _tensor(op, "grid", grid, ndims=(4,))
    if mode not in ("bilinear", "nearest"):
        raise ValueError(f"{op}: mode must be 'bilinear' or 'nearest' (bicubic is not supported), got {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"{op}: padding_mode must be 'zeros', 'border' or 'reflection', got {padding_mode!r}")
    n, c, h, w = input.shape
    if grid.shape[0] != n or grid.shape[3] != 2:
        raise ValueError(f"{op}: grid of shape ({n}, Ho, Wo, 2) expected for input {input.shape}, got {grid.shape}")
    ho, wo = grid.shape[1:3]

    def pixel(g: Tensor, size: int) -> Tensor:
        at = (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2
        if padding_mode == "reflection":
            at = _reflected(at, 0, 2 * (size - 1)) if align_corners else _reflected(at, -1, 2 * size - 1)
        return at.clamp(0, size - 1) if padding_mode != "zeros" else at
    ix, iy = pixel(grid[..., 0], w), pixel(grid[..., 1], h)
    flat = input.reshape(n, c, h * w)

    def tap(y: Tensor, x: Tensor, weight: Tensor | None) -> Tensor:
        """weight * input at integer-valued (y, x), zero where that lies outside."""
        inside = (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)
        index = (y.clamp(0, h - 1) * w + x.clamp(0, w - 1)).to(int64).reshape(n, 1, ho * wo)
        values = flat.gather(2, index.expand(n, c, ho * wo)).reshape(n, c, ho, wo)
        scale = where(inside, weight if weight is not None else 1.0, 0.0)
        return values * scale.unsqueeze(1)
    if mode == "nearest":
        return tap(iy.round(), ix.round(), None)
    x0, y0 = ix.floor(), iy.floor()
    right, down = ix - x0, iy - y0
    left, up = 1 - right, 1 - down
    return (tap(y0, x0, up * left) + tap(y0, x0 + 1, up * right)
            + tap(y0 + 1, x0, down * left) + tap(y0 + 1, x0 + 1, down * right))


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False) -> Tensor:
    """Resample the spatial dims of input (N, C, *spatial), 1 to 3 of them, to `size` or by
    `scale_factor`. Modes: 'nearest' (torch's floor rule) and 'nearest-exact': integer
    upscales of 2-D images take the upsample kernel, other sizes gather rows per axis;
    'linear' (3-D input), 'bilinear' (4-D), 'trilinear' (5-D), align_corners False (default)
    or True: per axis, a blend of two gathered rows at torch's source positions."""
    op = "interpolate"
    _tensor(op, "input", input, ndims=(3, 4, 5))
    if input.shape[0] == 0:
        return _empty_batch(interpolate, input, (), size, scale_factor, mode, align_corners,
                            recompute_scale_factor, antialias)
    linear = _LINEAR_MODES.get(mode)
    if mode not in ("nearest", "nearest-exact") and linear is None:
        raise ValueError(f"interpolate: mode {mode!r} is not supported (use 'nearest', 'nearest-exact', "
                         f"'linear', 'bilinear' or 'trilinear')")
    if linear is not None and input.ndim != linear:
        raise ValueError(f"interpolate: mode {mode!r} needs a {linear}-D input, got shape {input.shape}")
    if linear is None and align_corners is not None:
        raise ValueError("interpolate: align_corners only applies to the linear modes")
    if antialias:
        raise ValueError("interpolate: antialias is not supported")
    spatial = input.shape[2:]
    dims = len(spatial)
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: give exactly one of size and scale_factor")
    if size is not None:
        out_sizes = (size,) * dims if isinstance(size, (int, np.integer)) else tuple(size)
        if len(out_sizes) != dims:
            raise ValueError(f"interpolate: size {size} has {len(out_sizes)} entries for {dims} spatial dims "
                             f"of input {input.shape}")
        out_sizes = tuple(int(s) for s in out_sizes)
        factors = (None,) * dims
    else:
        factors = (scale_factor,) * dims if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        if len(factors) != dims:
            raise ValueError(f"interpolate: scale_factor {scale_factor} has {len(factors)} entries for {dims} "
                             f"spatial dims of input {input.shape}")
        factors = tuple(float(f) for f in factors)
        out_sizes = tuple(int(math.floor(s * f)) for s, f in zip(spatial, factors))
        if recompute_scale_factor:
            factors = (None,) * dims
    if min(out_sizes) < 1:
        raise ValueError(f"interpolate: output size {out_sizes} must be positive (input {input.shape})")
    if linear is not None:
        return _linear_resize(input, out_sizes, factors, bool(align_corners))
    exact = mode == "nearest-exact"
    indices = [_nearest_indices(s, o, f, exact) for s, o, f in zip(spatial, out_sizes, factors)]
    blocks = [o // s if o % s == 0 and np.array_equal(idx, np.arange(o) // (o // s)) else None
              for s, o, idx in zip(spatial, out_sizes, indices)]
    if dims == 2 and None not in blocks:
        return _upsample_blocks(input, blocks[0], blocks[1])
    out = input
    for d, (s, idx) in enumerate(zip(spatial, indices)):
        if not np.array_equal(idx, np.arange(s)):
            out = out.index_select(2 + d, tensor(idx))
    return out if out is not input else input.clone()


_LINEAR_MODES = {"linear": 3, "bilinear": 4, "trilinear": 5}  # mode -> the input's ndim


def _linear_resize(input: Tensor, out_sizes, factors, align_corners: bool) -> Tensor:
    """The linear modes, one spatial axis at a time (they are separable): output index i reads
    source position x = i * (in - 1) / (out - 1) (align_corners) or (i + 0.5) * scale - 0.5
    clamped at 0, scale = 1 / scale_factor where one was given, else in / out (torch's rule),
    and blends rows floor(x) and floor(x) + 1 (the last row twice at the edge)."""
    out = input
    for d, (in_size, out_size, factor) in enumerate(zip(input.shape[2:], out_sizes, factors)):
        i = np.arange(out_size, dtype=np.float64)
        if align_corners:
            position = i * ((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
        else:
            scale = 1.0 / factor if factor else in_size / out_size
            position = np.maximum((i + 0.5) * scale - 0.5, 0.0)
        low = np.minimum(np.floor(position).astype(np.int64), in_size - 1)
        high = np.minimum(low + 1, in_size - 1)
        if out_size == in_size and np.array_equal(position, i):
            continue  # the identity along this axis
        weight = (position - low).astype(np.float32).reshape((-1,) + (1,) * (len(out_sizes) - 1 - d))
        lerp = tensor(weight, dtype=input.dtype)
        out = out.index_select(2 + d, tensor(low)) * (1.0 - lerp) + out.index_select(2 + d, tensor(high)) * lerp
    return out if out is not input else input.clone()


def _upsample_blocks(input: Tensor, scale_h: int, scale_w: int) -> Tensor:
    if (scale_h, scale_w) == (1, 1):
        return input.clone()
    batch, channels, in_h, in_w = input.shape
    dev = gpu()
    out = Tensor(dev.upsample_nearest2d(input._buf, batch, channels, in_h, in_w, scale_h, scale_w),
                 (batch, channels, in_h * scale_h, in_w * scale_w))
    return _record("interpolate", out, (input,),
                   rule("upsample_nearest2d", dev, batch, channels, in_h, in_w, scale_h, scale_w))


def _pool_input(op: str, input: Tensor):
    _tensor(op, "input", input)
    x, unbatched = _batched(op, input, 2)
    return x, unbatched


def _one(op: str, name: str, value, minimum: int) -> int:
    """An int, or a 1-tuple of one (torch's 1-D layers accept both)."""
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"{op}: {name} must be an int or a 1-tuple, got {value!r}")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{op}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _as_planes(op: str, input: Tensor) -> Tensor:
    """(N, C, L) or (C, L) as (N, C, 1, L) or (C, 1, L): 1-D layers run as 2-D ones of height 1."""
    _tensor(op, "input", input, ndims=(2, 3))
    return input.unsqueeze(-2)


def conv1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """1-D convolution: input (N, C_in, L) or (C_in, L), weight (C_out, C_in/groups, k),
    bias (C_out) -> (N, C_out, L_out); padding an int, 'valid' or 'same'. Runs as conv2d
    over a height of 1."""
    op = "conv1d"
    _tensor(op, "weight", weight, ndims=(3,))
    padding = padding if isinstance(padding, str) else (0, _one(op, "padding", padding, 0))
    out = conv2d(_as_planes(op, input), weight.unsqueeze(-2), bias, (1, _one(op, "stride", stride, 1)), padding,
                 (1, _one(op, "dilation", dilation, 1)), groups)
    return out.squeeze(-2)


def conv_transpose1d(input: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
                     output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 1-D convolution: input (N, C_in, L) or (C_in, L), weight (C_in,
    C_out/groups, k), bias (C_out) -> (N, C_out, L_out). Runs as conv_transpose2d over a
    height of 1."""
    op = "conv_transpose1d"
    _tensor(op, "weight", weight, ndims=(3,))
    out = conv_transpose2d(_as_planes(op, input), weight.unsqueeze(-2), bias, (1, _one(op, "stride", stride, 1)),
                           (0, _one(op, "padding", padding, 0)), (0, _one(op, "output_padding", output_padding, 0)),
                           groups, (1, _one(op, "dilation", dilation, 1)))
    return out.squeeze(-2)


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """y[..., o] = input1[..., i] * weight[o, i, j] * input2[..., j] + bias[o]: inputs (*, in1)
    and (*, in2) with the same leading dims, weight (out, in1, in2), bias (out)."""
    op = "bilinear"
    _tensor(op, "input1", input1, min_ndim=1)
    _tensor(op, "input2", input2, min_ndim=1)
    _tensor(op, "weight", weight, ndims=(3,))
    out_f, in1, in2 = weight.shape
    if input1.shape[-1] != in1 or input2.shape[-1] != in2 or input1.shape[:-1] != input2.shape[:-1]:
        raise ValueError(f"bilinear: inputs of shapes {input1.shape} and {input2.shape} do not fit weight of shape "
                         f"{weight.shape} (want (*, {in1}) and (*, {in2}) with the same leading dims)")
    _optional(op, "bias", bias, (out_f,))
    lead = input1.shape[:-1]
    x1 = input1.reshape(-1, in1)
    mixed = matmul(x1, weight.permute(1, 0, 2).reshape(in1, out_f * in2)).reshape(-1, out_f, in2)
    out = (mixed * input2.reshape(-1, 1, in2)).sum(-1)
    if bias is not None:
        out = out + bias
    return out.reshape(*lead, out_f)


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Max over kernel_size windows of input (N, C, L) or (C, L); indices are positions in L."""
    op = "max_pool1d"
    kernel = _one(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or stride == [] or stride == () else _one(op, "stride", stride, 1)
    out = max_pool2d(_as_planes(op, input), (1, kernel), (1, stride), (0, _one(op, "padding", padding, 0)),
                     (1, _one(op, "dilation", dilation, 1)), ceil_mode, return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def avg_pool1d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Mean over kernel_size windows of input (N, C, L) or (C, L)."""
    op = "avg_pool1d"
    kernel = _one(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or stride == [] or stride == () else _one(op, "stride", stride, 1)
    out = avg_pool2d(_as_planes(op, input), (1, kernel), (1, stride), (0, _one(op, "padding", padding, 0)),
                     ceil_mode, count_include_pad)
    return out.squeeze(-2)


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """Max over kernel_size windows of input (N, C, H, W) or (C, H, W); stride defaults to
    kernel_size. return_indices gives each max's flat position h*W + w in its plane (int)."""
    op = "max_pool2d"
    if isinstance(input, Tensor) and input.ndim == 4 and input.shape[0] == 0:
        return _empty_batch(max_pool2d, input, (), kernel_size, stride, padding, dilation, ceil_mode, return_indices)
    x, unbatched = _pool_input(op, input)
    kernel = _pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or stride == [] or stride == () else _pair(op, "stride", stride, 1)
    padding = _pair(op, "padding", padding, 0)
    dilation = _pair(op, "dilation", dilation, 1)
    batch, channels, in_h, in_w = x.shape
    planes = batch * channels
    dev = gpu()
    values, indices, out_h, out_w = dev.max_pool2d(x._buf, planes, in_h, in_w, kernel, stride, padding, dilation,
                                                   ceil_mode)
    out = Tensor(values, (batch, channels, out_h, out_w))
    out = _record(op, out, (x,), rule(op, dev, indices, planes, in_h, in_w, out_h, out_w, kernel, stride, padding,
                                      dilation))
    index_tensor = Tensor(indices, out.shape, int64)
    if unbatched:
        out, index_tensor = out.squeeze(0), index_tensor.squeeze(0)
    return (out, index_tensor) if return_indices else out


def avg_pool2d(input: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override: int | None = None) -> Tensor:
    """Mean over kernel_size windows of input (N, C, H, W) or (C, H, W); stride defaults to
    kernel_size; the divisor counts padding unless count_include_pad=False."""
    op = "avg_pool2d"
    if isinstance(input, Tensor) and input.ndim == 4 and input.shape[0] == 0:
        return _empty_batch(avg_pool2d, input, (), kernel_size, stride, padding, ceil_mode,
                            count_include_pad, divisor_override)
    x, unbatched = _pool_input(op, input)
    kernel = _pair(op, "kernel_size", kernel_size, 1)
    stride = kernel if stride is None or stride == [] or stride == () else _pair(op, "stride", stride, 1)
    padding = _pair(op, "padding", padding, 0)
    batch, channels, in_h, in_w = x.shape
    planes = batch * channels
    dev = gpu()
    values, out_h, out_w = dev.avg_pool2d(x._buf, planes, in_h, in_w, kernel, stride, padding, ceil_mode,
                                          count_include_pad, divisor_override)
    out = Tensor(values, (batch, channels, out_h, out_w))
    out = _record(op, out, (x,), rule(op, dev, planes, in_h, in_w, out_h, out_w, kernel, stride, padding,
                                      count_include_pad, divisor_override))
    return out.squeeze(0) if unbatched else out


def _adaptive_sizes(op: str, input: Tensor, output_size, dims: int) -> tuple:
    """torch's output_size: an int (every dim), or a tuple whose None entries keep that dim."""
    spatial = input.shape[-dims:]
    if isinstance(output_size, (int, np.integer)) or output_size is None:
        output_size = (output_size,) * dims
    output_size = tuple(output_size)
    if len(output_size) != dims:
        raise ValueError(f"{op}: output_size must be an int or a {dims}-tuple, got {output_size!r}")
    sizes = tuple(s if o is None else int(o) for s, o in zip(spatial, output_size))
    if any(o < 1 for o in sizes):
        raise ValueError(f"{op}: output_size must be positive, got {output_size!r}")
    return sizes


def _adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """torch's adaptive pooling windows: output i covers [floor(i*size/out), ceil((i+1)*size/out))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _averaging(size: int, out: int) -> Tensor:
    """The (out, size) matrix whose product averages each adaptive window."""
    matrix = np.zeros((out, size), np.float32)
    for i, (start, end) in enumerate(_adaptive_windows(size, out)):
        matrix[i, start:end] = 1.0 / (end - start)
    return tensor(matrix)


def _adaptive_avg(op: str, input: Tensor, output_size, dims: int) -> Tensor:
    _tensor(op, "input", input, ndims=(dims + 1, dims + 2))
    sizes = _adaptive_sizes(op, input, output_size, dims)
    spatial = input.shape[-dims:]
    if sizes == spatial:
        return input.clone()
    if all(o == 1 for o in sizes):  # global pooling
        return input.mean(tuple(range(input.ndim - dims, input.ndim)), keepdim=True)
    if dims == 2 and all(s % o == 0 for s, o in zip(spatial, sizes)):  # even windows: one pooling kernel
        x, unbatched = _pool_input(op, input)
        out = avg_pool2d(x, (spatial[0] // sizes[0], spatial[1] // sizes[1]))
        return out.squeeze(0) if unbatched else out
    # Uneven windows: averaging matrices, one product per pooled dim (the last dim first).
    lead = input.shape[:-dims]
    x = input.reshape(-1, *spatial)
    x = matmul(x, _averaging(spatial[-1], sizes[-1]).transpose(0, 1))
    if dims == 2:
        x = matmul(_averaging(spatial[0], sizes[0]), x)
    return x.reshape(*lead, *sizes)


def _adaptive_max(op: str, input: Tensor, output_size, dims: int, return_indices: bool):
    _tensor(op, "input", input, ndims=(dims + 1, dims + 2))
    sizes = _adaptive_sizes(op, input, output_size, dims)
    if input.numel() == 0:
        raise ValueError(f"{op}: expected a non-empty input, got shape {input.shape}")
    out, index = input, None
    # Each pooled dim, the last first: gather every window padded to the widest, then max.
    # Last dim first, so the index of a tie is torch's: the first maximum in row-major order.
    for axis in reversed(range(dims)):
        dim = input.ndim - dims + axis
        size, count = input.shape[dim], sizes[axis]
        windows = _adaptive_windows(size, count)
        width = max(end - start for start, end in windows)
        # A narrower window repeats its last element: harmless under max (its gradient sums
        # back), and never a first maximum but where that last element is one.
        positions = tensor(np.array([[min(start + j, end - 1) for j in range(width)] for start, end in windows],
                                    np.int32).reshape(-1))
        shape = list(out.shape)
        shape[dim:dim + 1] = [count, width]
        gathered = out.index_select(dim, positions).reshape(*shape)
        # The first maximum of each window (also its gradient's one destination, as torch's
        # where values tie: a max over ReLU's zeros, say; amax would share it among them).
        out, which = gathered.max(dim + 1)
        if not return_indices:
            continue
        starts = tensor(np.array([start for start, _ in windows], np.int64)).reshape(count, *[1] * (input.ndim - 1 - dim))
        along = which + starts  # its position along this dim
        if index is None:
            index = along
        else:  # the later dims' index at the chosen element, behind this dim's position
            carried = index.index_select(dim, positions).reshape(*shape)
            carried = carried.gather(dim + 1, which.unsqueeze(dim + 1)).squeeze(dim + 1)
            index = along * int(np.prod(input.shape[dim + 1:])) + carried
    return (out, index) if return_indices else out


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Average (N, C, L) or (C, L) over torch's adaptive windows down to output_size."""
    return _adaptive_avg("adaptive_avg_pool1d", input, output_size, 1)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Average (N, C, H, W) or (C, H, W) over torch's adaptive windows down to output_size
    (an int or pair; None keeps that dim): one pooling kernel when the windows are even,
    else averaging matrices."""
    return _adaptive_avg("adaptive_avg_pool2d", input, output_size, 2)


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    """The largest element of each of torch's adaptive windows of (N, C, L) or (C, L);
    return_indices: also each maximum's position along L (int64), the first where tied."""
    return _adaptive_max("adaptive_max_pool1d", input, output_size, 1, return_indices)


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    """The largest element of each of torch's adaptive windows of (N, C, H, W) or (C, H, W);
    return_indices: also each maximum's flat position h*W + w in its plane (int64), the first
    in row-major order where tied, as torch's."""
    return _adaptive_max("adaptive_max_pool2d", input, output_size, 2, return_indices)


def pad(input: Tensor, pad: Sequence[int], mode: str = "constant", value: float | None = None) -> Tensor:
    """Pad (or, with negative amounts, crop) the last len(pad)//2 dims: pad = (left, right,
    top, bottom, ...) starting from the last dim, filled with `value` (constant mode)."""
    op = "pad"
    _tensor(op, "input", input, dtype=None)
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise ValueError(f"pad: pad {pad} must have an even length of at most 2 * {input.ndim} for input of shape "
                         f"{input.shape}")
    if mode != "constant":
        return _pad_by_index(input, pad, mode)
    before = [0] * input.ndim
    after = [0] * input.ndim
    for i in range(len(pad) // 2):
        before[input.ndim - 1 - i], after[input.ndim - 1 - i] = pad[2 * i], pad[2 * i + 1]
    if any(b < 0 or a < 0 for b, a in zip(before, after)):  # crop first
        crop = tuple(slice(max(-b, 0), s - max(-a, 0)) for s, b, a in zip(input.shape, before, after))
        if any(c.stop < c.start for c in crop):  # to exactly nothing is allowed, as in torch
            raise ValueError(f"pad: pad {pad} crops input of shape {input.shape} to a negative size")
        input = input[crop]
        before, after = [max(b, 0) for b in before], [max(a, 0) for a in after]
    shape = tuple(s + b + a for s, b, a in zip(input.shape, before, after))
    if shape == input.shape:
        return input
    dev = gpu()
    strides = contiguous_strides(shape)
    offset = sum(b * st for b, st in zip(before, strides))
    fill = 0.0 if value is None else float(value)
    if input.dtype == float32:
        buf = dev.unary("fill", dev.empty(numel(shape)), fill)
    else:
        buf = dev.upload(np.full(numel(shape), fill, np.int32))
    if input.numel() == 0:  # only the fill: no element to place, the gradient is empty
        return linked_empty(Tensor(buf, shape, input.dtype), input)
    dev.strided_scatter(input._buf, buf, input.shape, strides, offset)
    out = Tensor(buf, shape, input.dtype)
    return _record(op, out, (input,), rule("pad", dev, input.shape, strides, offset))


def _pad_by_index(input: Tensor, pad: tuple, mode: str) -> Tensor:
    """reflect / replicate / circular padding of the last len(pad)//2 dims, each one gather
    along its dim (index_select: its gradient scatters back, summing repeated elements).
    As torch: only the dims after the first two (N, C) of a batched input, or after the
    first of an unbatched one, and reflect needs each pad smaller than its dim."""
    padded = len(pad) // 2
    if input.ndim - padded < 1:
        raise ValueError(f"pad: {mode} padding of {padded} dims needs an input with more dims than that, "
                         f"got shape {input.shape}")
    if input.numel() == 0:
        raise ValueError(f"pad: {mode} padding needs a non-empty input, got shape {input.shape}")
    out = input
    for i in range(padded):
        dim = input.ndim - 1 - i
        size = input.shape[dim]
        before, after = pad[2 * i], pad[2 * i + 1]
        if before < 0 or after < 0:
            raise ValueError(f"pad: {mode} padding takes no negative amounts, got pad {pad}")
        if mode == "reflect" and (before >= size or after >= size):
            raise ValueError(f"pad: reflect padding ({before}, {after}) of dim {dim} must be smaller than its size "
                             f"{size} (input shape {input.shape})")
        if mode == "circular" and (before > size or after > size):
            raise ValueError(f"pad: circular padding ({before}, {after}) of dim {dim} must be at most its size "
                             f"{size} (input shape {input.shape})")
        if before == after == 0:
            continue
        positions = np.arange(-before, size + after)
        if mode == "reflect":
            positions = np.abs(positions)
            positions = np.where(positions >= size, 2 * (size - 1) - positions, positions)
        elif mode == "replicate":
            positions = np.clip(positions, 0, size - 1)
        else:
            positions = positions % size
        out = out.index_select(dim, tensor(positions.astype(np.int32)))
    return out


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """(*, C*r*r, H, W) -> (*, C, H*r, W*r), as torch: channel c*r*r + i*r + j goes to
    output pixel (h*r + i, w*r + j) of channel c."""
    op = "pixel_shuffle"
    _tensor(op, "input", input, min_ndim=3, dtype=None)
    r = int(upscale_factor)
    *batch, channels, height, width = input.shape
    if r < 1 or channels % (r * r):
        raise ValueError(f"pixel_shuffle: the channels ({channels}, input shape {input.shape}) must be divisible "
                         f"by upscale_factor squared ({r}**2)")
    lead = len(batch)
    x = input.reshape(*batch, channels // (r * r), r, r, height, width)
    x = x.permute(*range(lead), lead, lead + 3, lead + 1, lead + 4, lead + 2)
    return x.reshape(*batch, channels // (r * r), height * r, width * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """The inverse of pixel_shuffle: (*, C, H*r, W*r) -> (*, C*r*r, H, W)."""
    op = "pixel_unshuffle"
    _tensor(op, "input", input, min_ndim=3, dtype=None)
    r = int(downscale_factor)
    *batch, channels, height, width = input.shape
    if r < 1 or height % r or width % r:
        raise ValueError(f"pixel_unshuffle: height and width (input shape {input.shape}) must be divisible by "
                         f"downscale_factor ({r})")
    lead = len(batch)
    x = input.reshape(*batch, channels, height // r, r, width // r, r)
    x = x.permute(*range(lead), lead, lead + 2, lead + 4, lead + 1, lead + 3)
    return x.reshape(*batch, channels * r * r, height // r, width // r)


def instance_norm(input: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each (sample, channel) plane of (N, C, *) by its own statistics (group norm
    with one channel per group), or by running_mean / running_var when use_input_stats is
    False. With running buffers and use_input_stats, they move towards the batch's average
    of the planes' means and unbiased variances, as torch's."""
    op = "instance_norm"
    _tensor(op, "input", input, min_ndim=3)
    channels = input.shape[1]
    for name, value in (("running_mean", running_mean), ("running_var", running_var)):
        _optional(op, name, value, (channels,))
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and running_var")
        _optional(op, "weight", weight, (channels,))
        _optional(op, "bias", bias, (channels,))
        view = (1, channels) + (1,) * (input.ndim - 2)
        out = (input - running_mean.reshape(view)) / (running_var.reshape(view) + eps).sqrt()
        if weight is not None:
            out = out * weight.reshape(view)
        if bias is not None:
            out = out + bias.reshape(view)
        return out
    out = group_norm(input, channels, weight, bias, eps)
    if running_mean is not None or running_var is not None:
        spatial = numel(input.shape[2:])
        with no_grad():
            planes = input.detach().reshape(input.shape[0], channels, spatial)
            mean = planes.mean(2)
            if running_mean is not None:
                running_mean.mul_(1 - momentum).add_(mean.mean(0) * momentum)
            if running_var is not None:
                var = ((planes - mean.reshape(input.shape[0], channels, 1)) ** 2).sum(2) / max(spatial - 1, 1)
                running_var.mul_(1 - momentum).add_(var.mean(0) * momentum)
    return out


# ===================================================================== activations

def relu(input: Tensor, inplace: bool = False) -> Tensor:
    return unary_op("relu", _tensor("relu", "input", input))


def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x)."""
    return unary_op("silu", _tensor("silu", "input", input))


def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (approximate='none', erf to ~1e-7) or its tanh approximation ('tanh')."""
    _tensor("gelu", "input", input)
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return unary_op("gelu" if approximate == "none" else "gelu_tanh", input)


def sigmoid(input: Tensor) -> Tensor:
    return unary_op("sigmoid", _tensor("sigmoid", "input", input))


def tanh(input: Tensor) -> Tensor:
    return unary_op("tanh", _tensor("tanh", "input", input))


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    return unary_op("leaky_relu", _tensor("leaky_relu", "input", input), float(negative_slope))


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return unary_op("elu", _tensor("elu", "input", input), float(alpha))


def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold."""
    return unary_op("softplus", _tensor("softplus", "input", input), float(beta), float(threshold))


def hardtanh(input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    """input clamped to [min_val, max_val]."""
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) must not be greater than max_val ({max_val})")
    return _tensor("hardtanh", "input", input).clamp(min_val, max_val)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6)."""
    return hardtanh(input, 0.0, 6.0)


def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), stable for large |x|."""
    return -softplus(-_tensor("logsigmoid", "input", input))


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * tanh(softplus(x))."""
    return input * tanh(softplus(_tensor("mish", "input", input)))


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """input / max(||input||_p over dim, eps). The norm's gradient is 0 at a zero vector (as
    torch's norm), so a zero vector's gradient is grad / eps, not NaN."""
    _tensor("normalize", "input", input)
    if p == 1:
        norm = input.abs().sum(dim, keepdim=True)
    else:
        norm = input.norm(p, dim, keepdim=True)
    return input / norm.clamp(min=eps)


# ===================================================================== dropout and embeddings

def gumbel_softmax(logits: Tensor, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1) -> Tensor:
    """softmax((logits + g) / tau) with g ~ Gumbel(0, 1) drawn from the random stream; hard:
    the one-hot of each sample's largest entry in the forward, the soft sample's gradient in
    the backward (straight through), as torch."""
    op = "gumbel_softmax"
    _tensor(op, "logits", logits, min_ndim=1)
    if not tau > 0:
        raise ValueError(f"gumbel_softmax: tau must be positive, got {tau!r}")
    uniform = default_generator().random(logits.shape)
    # -log(E) with E ~ Exponential(1) = -log(-log(U)); U in [0, 1): its tiny ends are kept off 0.
    noise = -np.log(-np.log(np.clip(uniform, np.finfo(np.float64).tiny, 1.0 - 2.0 ** -53)))
    y_soft = softmax((logits + tensor(noise.astype(np.float32))) / float(tau), dim)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim, keepdim=True)
    y_hard = zeros(*y_soft.shape).scatter(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p) (training only).
    The mask comes from a seed drawn from anygpu's generator (ag.manual_seed), hashed
    per element on the GPU; the backward re-derives it from the same seed."""
    _tensor("dropout", "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return input
    if p == 1.0:
        return input * 0.0
    dev = gpu()
    seed = int(default_generator().integers(0, 2**63))
    out = Tensor(dev.dropout(input._buf, p, seed), input.shape)
    return _record("dropout", out, (input,), rule("dropout", dev, p, seed))


def _channel_dropout(op: str, input: Tensor, p: float, training: bool, spatial_dims: int) -> Tensor:
    """Zero whole channels: one draw per (N, C) (or per C without a batch dim), the
    survivors scaled by 1/(1-p); the mask comes from anygpu's generator."""
    _tensor(op, "input", input)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}: p must be in [0, 1], got {p}")
    if input.ndim not in (spatial_dims + 1, spatial_dims + 2):
        raise ValueError(f"{op}: expected a {spatial_dims + 1}-D or {spatial_dims + 2}-D input, got shape "
                         f"{input.shape}")
    if not training or p == 0.0:
        return input
    channels = input.shape[:input.ndim - spatial_dims]
    keep = default_generator().random(channels) >= p
    scale = np.where(keep, 1.0 / (1.0 - p) if p < 1.0 else 0.0, 0.0).astype(np.float32)
    return input * tensor(scale.reshape(channels + (1,) * spatial_dims))


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Channel dropout of (N, C, L) or (C, L): each channel zeroed with probability p."""
    return _channel_dropout("dropout1d", input, p, training, 1)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Channel dropout of (N, C, H, W) or (C, H, W): each channel zeroed with probability p."""
    return _channel_dropout("dropout2d", input, p, training, 2)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, max_norm=None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False, sparse: bool = False) -> Tensor:
    """Rows of weight (num_embeddings, embedding_dim) picked by the int indices in input (*)
    -> (*, embedding_dim). The backward scatter-adds into the picked rows; padding_idx's
    row gets no gradient."""
    op = "embedding"
    _tensor(op, "input", input, dtype=int32)
    _tensor(op, "weight", weight, ndims=(2,))
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise ValueError("embedding: max_norm, scale_grad_by_freq and sparse are not supported")
    rows, dim = weight.shape
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise ValueError(f"embedding: padding_idx {padding_idx} is out of range for {rows} embeddings")
        padding_idx %= rows
    host = input._host
    if host is not None and host.size and (host.min() < 0 or host.max() >= rows):
        bad = host.min() if host.min() < 0 else host.max()
        raise ValueError(f"embedding: index {int(bad)} is out of range for {rows} embeddings "
                         f"(weight of shape {weight.shape})")
    dev = gpu()
    n = input.numel()
    ids = input._buf  # (read once: a strided view gathers on each read)
    out = Tensor(dev.gather_axis(weight._buf, ids, 1, rows, n, dim), input.shape + (dim,))
    skip = -1 if padding_idx is None else padding_idx
    return _record(op, out, (weight,), rule("embedding", dev, ids, 1, rows, n, dim, skip=skip))


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm=None,
                  norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                  sparse: bool = False, per_sample_weights: Tensor | None = None,
                  include_last_offset: bool = False, padding_idx: int | None = None) -> Tensor:
    """Sums, means or maxima of bags of embedding rows, as torch: input (B, N) is B bags of N
    indices; input (n,) with offsets (B,) (or B+1 with include_last_offset) cuts it into bags
    starting at each offset. per_sample_weights (sum mode) scale each row; padding_idx's rows
    are left out (and not counted by mean); an empty bag gives zeros."""
    op = "embedding_bag"
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"embedding_bag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
    _tensor(op, "input", input, ndims=(1, 2), dtype=int32)
    _tensor(op, "weight", weight, ndims=(2,))
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise ValueError("embedding_bag: max_norm, scale_grad_by_freq and sparse are not supported")
    rows, dim = weight.shape
    indices = (input._host if input._host is not None else input.numpy()).astype(np.int64).reshape(-1)
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None for a 2-D input (each row is a bag)")
        starts = np.arange(input.shape[0], dtype=np.int64) * input.shape[1]
    else:
        if offsets is None:
            raise ValueError("embedding_bag: a 1-D input needs offsets (where each bag starts)")
        _tensor(op, "offsets", offsets, ndims=(1,), dtype=int32)
        starts = (offsets._host if offsets._host is not None else offsets.numpy()).astype(np.int64)
        if include_last_offset:
            starts = starts[:-1]
        if starts.size and (starts[0] != 0 or (np.diff(starts) < 0).any() or starts[-1] > indices.size):
            raise ValueError(f"embedding_bag: offsets must start at 0 and rise to at most {indices.size}, "
                             f"got {starts.tolist()[:8]}")
    bags = starts.size
    ends = np.append(starts[1:], indices.size) if bags else starts
    keep = np.ones(indices.size, bool)
    if padding_idx is not None:
        if not -rows <= padding_idx < rows:
            raise ValueError(f"embedding_bag: padding_idx {padding_idx} is out of range for {rows} embeddings")
        keep = indices != padding_idx % rows
    if per_sample_weights is not None:
        if mode != "sum":
            raise ValueError(f"embedding_bag: per_sample_weights needs mode='sum', got {mode!r}")
        if per_sample_weights.shape != input.shape:
            raise ValueError(f"embedding_bag: per_sample_weights of shape {per_sample_weights.shape} must match "
                             f"input of shape {input.shape}")
    bag_of = np.repeat(np.arange(bags), ends - starts)
    picked = np.flatnonzero(keep)
    counts = np.bincount(bag_of[picked], minlength=bags)
    if mode == "max":
        width = int(counts.max()) if bags else 0
        if width == 0:
            return zeros(bags, dim)
        # each bag's kept positions, padded with its last one (harmless under max); empty bags
        # read row 0 and are zeroed after
        lists = [picked[bag_of[picked] == b] for b in range(bags)]
        positions = np.array([[lst[min(j, len(lst) - 1)] if len(lst) else 0 for j in range(width)] for lst in lists])
        flat = tensor(indices[positions.reshape(-1)].astype(np.int32))
        out = embedding(flat, weight).reshape(bags, width, dim).amax(1)
        if (counts == 0).any():
            out = out * tensor((counts > 0).astype(np.float32)).reshape(bags, 1)
        return out
    kept = tensor(indices[picked].astype(np.int32))
    values = embedding(kept, weight)
    if per_sample_weights is not None:
        values = values * per_sample_weights.reshape(-1)[tensor(picked.astype(np.int32))].reshape(-1, 1)
    if mode == "mean":
        values = values * tensor((1.0 / np.maximum(counts, 1))[bag_of[picked]].astype(np.float32)).reshape(-1, 1)
    return zeros(bags, dim).index_add(0, tensor(bag_of[picked].astype(np.int32)), values)


def _patch_positions(op: str, height: int, width: int, kernel_size, dilation, padding, stride) -> tuple:
    """Where each (kernel offset, block) reads in the padded plane, row-major over the padded
    (height, width): an int array (kh*kw, L), with the padded sizes and the block counts."""
    kh, kw = _pair(op, "kernel_size", kernel_size, 1)
    dh, dw = _pair(op, "dilation", dilation, 1)
    ph, pw = _pair(op, "padding", padding, 0)
    sh, sw = _pair(op, "stride", stride, 1)
    hp, wp = height + 2 * ph, width + 2 * pw
    bh, bw = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    if bh < 1 or bw < 1:
        raise ValueError(f"{op}: a {kh}x{kw} kernel (dilation {(dh, dw)}) finds no block in a {height}x{width} plane "
                         f"padded by {(ph, pw)}")
    rows = (np.arange(kh) * dh)[:, None, None, None] + (np.arange(bh) * sh)[None, None, :, None]
    cols = (np.arange(kw) * dw)[None, :, None, None] + (np.arange(bw) * sw)[None, None, None, :]
    positions = (rows * wp + cols).reshape(kh * kw, bh * bw)
    return positions, (hp, wp), (ph, pw), kh * kw


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding blocks of (N, C, H, W) as columns (im2col): (N, C*kh*kw, L), L the number of
    blocks, ordered as torch's; differentiable (a gather of the zero-padded planes)."""
    op = "unfold"
    _tensor(op, "input", input, ndims=(3, 4))
    unbatched = input.ndim == 3
    x = input.unsqueeze(0) if unbatched else input
    batch, channels, height, width = x.shape
    positions, (hp, wp), (ph, pw), taps = _patch_positions(op, height, width, kernel_size, dilation, padding, stride)
    if ph or pw:
        x = pad(x, (pw, pw, ph, ph))
    flat = tensor(positions.reshape(-1).astype(np.int32))
    out = x.reshape(batch, channels, hp * wp).index_select(2, flat).reshape(batch, channels * taps, -1)
    return out.squeeze(0) if unbatched else out


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """The adjoint of unfold (col2im): columns (N, C*kh*kw, L) summed back into (N, C, H, W),
    overlapping blocks adding up, as torch."""
    op = "fold"
    _tensor(op, "input", input, ndims=(2, 3))
    height, width = _pair(op, "output_size", output_size, 1)
    unbatched = input.ndim == 2
    x = input.unsqueeze(0) if unbatched else input
    positions, (hp, wp), (ph, pw), taps = _patch_positions(op, height, width, kernel_size, dilation, padding, stride)
    batch, rows, blocks = x.shape
    if rows % taps or blocks != positions.shape[1]:
        raise ValueError(f"fold: input of shape {input.shape} does not hold {taps} kernel taps per channel and "
                         f"{positions.shape[1]} blocks (output_size {(height, width)})")
    channels = rows // taps
    flat = tensor(positions.reshape(-1).astype(np.int32))
    planes = zeros(batch, channels, hp * wp).index_add(2, flat, x.reshape(batch, channels, taps * blocks))
    out = planes.reshape(batch, channels, hp, wp)[:, :, ph:ph + height, pw:pw + width]
    return out.squeeze(0) if unbatched else out


def one_hot(tensor_: Tensor, num_classes: int = -1) -> Tensor:
    """int tensor (*) -> int tensor (*, num_classes) with a 1 at each index."""
    _tensor("one_hot", "tensor", tensor_, dtype=int32)
    if num_classes < 0:
        num_classes = int(tensor_.numpy().max()) + 1 if tensor_.numel() else 0
    host = tensor_._host
    if host is not None and host.size and (host.min() < 0 or host.max() >= num_classes):
        raise ValueError(f"one_hot: class values must be in [0, {num_classes}), got "
                         f"{int(host.min())}..{int(host.max())}")
    classes = tensor(np.arange(num_classes, dtype=np.int32))
    with no_grad():
        return (tensor_.unsqueeze(-1) == classes).long()



# ===================================================================== more activations, distances, losses
# Composed from Tensor ops (their backward comes with them), with torch's formulas.

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with torch's fixed alpha and scale."""
    return elu(input, _SELU_ALPHA) * _SELU_SCALE


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x where x > 0, alpha * (exp(x / alpha) - 1) elsewhere."""
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0")
    return elu(input * (1.0 / alpha), 1.0) * alpha


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b), a and b the two halves of input along dim."""
    _tensor("glu", "input", input, min_ndim=1)
    if input.shape[dim] % 2:
        raise ValueError(f"glu: halving only works on an even-sized dim, got size {input.shape[dim]} at dim {dim}")
    first, second = input.chunk(2, dim)
    return first * sigmoid(second)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """relu6(x + 3) / 6."""
    return (_tensor("hardsigmoid", "input", input) + 3.0).clamp(0.0, 6.0) * (1.0 / 6.0)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * relu6(x + 3) / 6."""
    return input * hardsigmoid(input)


def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    return input / (_tensor("softsign", "input", input).abs() + 1.0)


def tanhshrink(input: Tensor) -> Tensor:
    return input - tanh(input)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """softmax(-x) along dim."""
    return softmax(-_tensor("softmin", "input", input), dim)


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """x where x > threshold, value elsewhere."""
    return where(_tensor("threshold", "input", input) > threshold, input, float(value))


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """x where x >= 0, weight * x elsewhere; weight (1,) or (C,) along dim 1 (dim 0 of a 1-D input)."""
    _tensor("prelu", "input", input)
    _tensor("prelu", "weight", weight, ndims=(1,))
    channels = weight.shape[0]
    if channels != 1:
        channel_dim = 1 if input.ndim >= 2 else 0
        if input.ndim == 0 or input.shape[channel_dim] != channels:
            raise ValueError(f"prelu: weight has {channels} parameters, expected the input's channel count "
                             f"(dim 1 of shape {input.shape})")
        weight = weight.reshape((channels,) + (1,) * (input.ndim - channel_dim - 1))
    return where(input >= 0, input, input * weight)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps)) along dim (inputs broadcast)."""
    _tensor("cosine_similarity", "x1", x1)
    _tensor("cosine_similarity", "x2", x2)
    shape = broadcast_shapes("cosine_similarity", x1.shape, x2.shape)
    x1, x2 = x1.expand(*shape), x2.expand(*shape)
    norm1 = (x1 * x1).sum(dim, keepdim=True).sqrt().clamp(min=eps)
    norm2 = (x2 * x2).sum(dim, keepdim=True).sqrt().clamp(min=eps)
    return ((x1 / norm1) * (x2 / norm2)).sum(dim)


def pairwise_distance(x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> Tensor:
    """||x1 - x2 + eps||_p over the last dim."""
    _tensor("pairwise_distance", "x1", x1)
    _tensor("pairwise_distance", "x2", x2)
    diff = x1 - x2 + eps
    if p == 2:
        return (diff * diff).sum(-1, keepdim=keepdim).sqrt()
    if p == 1:
        return diff.abs().sum(-1, keepdim=keepdim)
    if math.isinf(p):
        return diff.abs().max(-1, keepdim=keepdim)[0] if p > 0 else diff.abs().min(-1, keepdim=keepdim)[0]
    return (diff.abs() ** p).sum(-1, keepdim=keepdim) ** (1.0 / p)


def margin_ranking_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, size_average=None,
                        reduce=None, reduction: str = "mean") -> Tensor:
    """max(0, -y (x1 - x2) + margin)."""
    reduction = _reduction("margin_ranking_loss", reduction, size_average, reduce)
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0.0), reduction)


def soft_margin_loss(input: Tensor, target: Tensor, size_average=None, reduce=None,
                     reduction: str = "mean") -> Tensor:
    """log(1 + exp(-y x))."""
    reduction = _reduction("soft_margin_loss", reduction, size_average, reduce)
    return _reduce(softplus(-target * input), reduction)


def hinge_embedding_loss(input: Tensor, target: Tensor, margin: float = 1.0, size_average=None, reduce=None,
                         reduction: str = "mean") -> Tensor:
    """x where y = 1, max(0, margin - x) where y = -1."""
    reduction = _reduction("hinge_embedding_loss", reduction, size_average, reduce)
    loss = where(target != 1, (margin - input).clamp(min=0.0), 0.0) + where(target != -1, input, 0.0)
    return _reduce(loss, reduction)


def cosine_embedding_loss(input1: Tensor, input2: Tensor, target: Tensor, margin: float = 0.0, size_average=None,
                          reduce=None, reduction: str = "mean") -> Tensor:
    """1 - cos(x1, x2) where y = 1, max(0, cos(x1, x2) - margin) where y = -1, over the
    last dim (torch's cos with 1e-12 added to each squared norm)."""
    reduction = _reduction("cosine_embedding_loss", reduction, size_average, reduce)
    dim = input1.ndim - 1
    dot = (input1 * input2).sum(dim)
    cos = dot / (((input1 * input1).sum(dim) + 1e-12) * ((input2 * input2).sum(dim) + 1e-12)).sqrt()
    loss = where(target == 1, 1.0 - cos, 0.0) + where(target == -1, (cos - margin).clamp(min=0.0), 0.0)
    return _reduce(loss, reduction)


def triplet_margin_loss(anchor: Tensor, positive: Tensor, negative: Tensor, margin: float = 1.0, p: float = 2,
                        eps: float = 1e-6, swap: bool = False, size_average=None, reduce=None,
                        reduction: str = "mean") -> Tensor:
    """max(0, margin + d(a, p) - d(a, n)) with d the pairwise p-norm distance (swap: d(a, n)
    replaced by min(d(a, n), d(p, n)))."""
    reduction = _reduction("triplet_margin_loss", reduction, size_average, reduce)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((margin + d_pos - d_neg).clamp(min=0.0), reduction)


def poisson_nll_loss(input: Tensor, target: Tensor, log_input: bool = True, full: bool = False, size_average=None,
                     eps: float = 1e-8, reduce=None, reduction: str = "mean") -> Tensor:
    """exp(x) - t x (log_input) or x - t log(x + eps); full adds Stirling's term
    t log t - t + 0.5 log(2 pi t) where t > 1."""
    reduction = _reduction("poisson_nll_loss", reduction, size_average, reduce)
    loss = input.exp() - target * input if log_input else input - target * (input + eps).log()
    if full:
        safe = where(target > 1, target, 1.0)
        stirling = safe * safe.log() - safe + (safe * (2 * math.pi)).log() * 0.5
        loss = loss + where(target > 1, stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(input: Tensor, target: Tensor, var, full: bool = False, eps: float = 1e-6,
                      reduction: str = "mean") -> Tensor:
    """0.5 (log(var) + (input - target)^2 / var) (+ 0.5 log(2 pi) when full), var clamped to
    eps; var has the input's shape, or one dim less / a last dim of 1 (one variance per
    sample), or is a number."""
    op = "gaussian_nll_loss"
    reduction = _reduction(op, reduction)
    if not isinstance(var, Tensor):
        var = tensor(np.full(input.shape, float(var), np.float32))
    if var.shape != input.shape:
        if var.shape == input.shape[:-1]:
            var = var.unsqueeze(-1)
        elif not (var.ndim == input.ndim and var.shape[:-1] == input.shape[:-1] and var.shape[-1] == 1):
            raise ValueError(f"{op}: var of shape {var.shape} does not fit input of shape {input.shape}")
    # torch clamps var in place without recording it: the gradient passes as if unclamped.
    with no_grad():
        floor = (var.clamp(min=eps) - var).detach()
    var = var + floor
    loss = ((input - target) ** 2 / var + var.log()) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def multilabel_soft_margin_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, size_average=None,
                                reduce=None, reduction: str = "mean") -> Tensor:
    """-(t logsigmoid(x) + (1 - t) logsigmoid(-x)), averaged over the classes (dim 1)."""
    reduction = _reduction("multilabel_soft_margin_loss", reduction, size_average, reduce)
    loss = -(target * logsigmoid(input) + (1.0 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    classes = input.shape[-1] if input.ndim else 1
    return _reduce(loss.sum(input.ndim - 1) * (1.0 / classes), reduction)


# ===================================================================== float16 and autocast

def _float_args(args, kwargs):
    return [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor) and a.dtype.is_floating_point]


def _converted(value, dtype):
    # (a master weight's float16 copy is made once per autocast region: _autocast_cast)
    return _autocast_cast(value, dtype) if isinstance(value, Tensor) and value.dtype.is_floating_point and \
        value.dtype is not dtype else value


def _rounded_half(out):
    if isinstance(out, Tensor):
        return out.half() if out.dtype is float32 else out
    if isinstance(out, tuple):
        return type(out)(*(_rounded_half(o) for o in out)) if hasattr(out, "_fields") else \
            tuple(_rounded_half(o) for o in out)
    return out


# Activations that are one elementwise kernel (unary_op): on a float16 input that kernel runs
# on the f16 Buffer itself (f32 math, the result rounded once), forward and backward.
_HALF_NATIVE = {"relu", "silu", "gelu", "sigmoid", "tanh", "leaky_relu", "elu", "softplus"}


# Convolutions that run on float16 operands as they are where the device has matrix units
# (ops/conv_sgmat.py; conv1d and conv_transpose1d are their 2-D forms).
_HALF_CONV = {"conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d"}


def _half_or_autocast(fn):
    """float16 inputs and autocast for a functional op. Under autocast the op's policy
    (amp.LOWER: float16, amp.FLOAT32: float32) converts its float tensor arguments. A
    float16 call runs the float32 kernels on converted arguments (recorded conversions, so
    gradients come back in each argument's dtype) and rounds the result to float16 once;
    linear runs as an f16 matmul (f16 stored, summed in f32), the _HALF_NATIVE activations
    as their f16 elementwise kernels, the _HALF_CONV convolutions on matrix units where the
    device has them."""
    name = fn.__name__

    @functools.wraps(fn)
    def run(*args, **kwargs):
        want = amp.policy(name) if amp._state.__dict__ else None
        floats = _float_args(args, kwargs)
        if want is None and not any(t.dtype is float16 for t in floats):
            return fn(*args, **kwargs)
        if want is not None:
            args = tuple(_converted(a, want) for a in args)
            kwargs = {k: _converted(v, want) for k, v in kwargs.items()}
            floats = _float_args(args, kwargs)
        half = bool(floats) and floats[0].dtype is float16
        if half and name == "linear" and all(t.dtype is float16 for t in floats):
            return _linear_half(*args, **kwargs)
        if half and name in _HALF_NATIVE:
            return fn(*args, **kwargs)
        if half and name in _HALF_CONV and all(t.dtype is float16 for t in floats) and conv_sgmat.available(gpu()):
            return fn(*args, **kwargs)   # f16 implicit GEMMs on matrix units (ops/conv_sgmat.py)
        if half and name == "scaled_dot_product_attention" and all(t.dtype is float16 for t in floats[:3]) and (
                flash_attention.variant(gpu(), "f16", floats[0].shape[-1], floats[2].shape[-1]) is not None):
            return fn(*args, **kwargs)   # flash kernels (matrix units; ANYGPU_FLASH): f16 products, softmax in f32
        if half and name == "scaled_dot_product_attention" and all(t.dtype is float16 for t in floats[:3]) and (
                os.environ.get("ANYGPU_ATTENTION_PRODUCTS", "f32") == "f16"):
            return fn(*args, **kwargs)   # composed, products on f16 operands (matrix units where there are)
        # Otherwise (no matrix flash here, or ANYGPU_FLASH=0) float16 attention runs the f32 composed
        # kernels on converted operands and rounds its result once: on the H200 (2026-12-03,
        # 64x6x256x64 causal, forward + backward) that took 0.79 ms, the f16 composed path on matrix
        # units 1.10 (its batched products with k = 64 run at 20-40 TFLOP/s) and matrix flash 0.67
        # (docs/BENCHMARKS.md, session 16; ANYGPU_ATTENTION_PRODUCTS=f16 takes the f16 composed path).
        args = tuple(_converted(a, float32) for a in args)
        kwargs = {k: _converted(v, float32) for k, v in kwargs.items()}
        out = fn(*args, **kwargs)
        return _rounded_half(out) if half else out
    return run


def _linear_half(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return _linear(input, weight, bias, float16)


for _name in __all__:
    if _name != "one_hot":
        globals()[_name] = _half_or_autocast(globals()[_name])
del _name
from .extra_functional import *  # noqa: E402,F401,F403  (rms_norm, in-place activations, ...: extra_functional.__all__)
from .extra_functional import __all__ as _extra_names  # noqa: E402
__all__ += _extra_names
