"""Layer 0: the seed's GPU ops as methods of `Device` (one Python function per op).

`Device` is the runtime's device with every op of this package as a method, so
`dev.matmul(a, b, m, n, k)` reads like the seed's `self.dev.matmul(...)`."""

from __future__ import annotations

import threading

from .. import runtime
from . import elementwise, matmul, nd, optim
from . import attention, broadcast, conv, loss, norm, reduce, shape, softmax, upsample
from . import batchnorm, index, layernorm, lossfn, pool, random
from . import intmath
from . import sparse
from . import scaler
from . import flash_attention
from . import foreach
from . import host64
from . import radix

_OP_MODULES = [elementwise, matmul, nd, reduce, broadcast, shape, upsample, softmax, attention, conv, norm,
               loss, optim]
_OP_MODULES += [batchnorm, index, layernorm, lossfn, pool, random]  # the ops behind nn.functional
_OP_MODULES += [intmath]  # integer tensors and sorting
_OP_MODULES += [sparse]  # sparse matrices as segments of entries (anygpu.sparse)
_OP_MODULES += [scaler]  # GradScaler's unscale of many gradients per dispatch (anygpu.amp)
_OP_MODULES += [flash_attention]  # attention without the scores in memory
_OP_MODULES += [foreach]  # several tensors per dispatch (clip_grad_norm_)
_OP_MODULES += [radix]  # deterministic sort and scan of u32 words


class Device(host64.HostMemory, runtime.Device):
    """A GPU device with every Layer-0 op as a method (see SPEC Layer 0): each is the op
    module's function, named here so that "go to definition" on `dev.conv2d` finds it.
    A new op function is listed here too (tests/ops/test_device_methods.py checks)."""

    # elementwise.py
    unary = elementwise.unary
    binary = elementwise.binary
    add = elementwise.add
    sub = elementwise.sub
    mul = elementwise.mul
    scale = elementwise.scale
    relu = elementwise.relu
    sigmoid = elementwise.sigmoid
    swish = elementwise.swish
    tanh_act = elementwise.tanh_act
    relu_backward = elementwise.relu_backward
    sigmoid_backward = elementwise.sigmoid_backward
    swish_backward = elementwise.swish_backward
    tanh_backward = elementwise.tanh_backward
    # matmul.py
    batch_matmul = matmul.batch_matmul
    matmul_strided = matmul.matmul_strided
    matmul = matmul.matmul  # last: the name shadows the module in this class body
    # scaler.py
    unscale_check = scaler.unscale_check
    update_scale = scaler.update_scale
    # foreach.py
    sum_squares = foreach.sum_squares
    scale_by = foreach.scale_by
    cast_many = foreach.cast_many
    # nd.py
    broadcast_binary = nd.broadcast_binary
    strided_gather = nd.strided_gather
    strided_scatter = nd.strided_scatter
    reduce_axis = nd.reduce_axis
    cast = nd.cast
    where = nd.where
    sum_dims = nd.sum_dims
    sum_to_shape = nd.sum_to_shape
    # reduce.py
    sum_all = reduce.sum_all
    sum_inner = reduce.sum_inner
    sum_rows = reduce.sum_rows
    # broadcast.py
    add_broadcast = broadcast.add_broadcast
    add_per_col = broadcast.add_per_col
    # shape.py
    transpose = shape.transpose
    concat = shape.concat
    # upsample.py
    upsample_nearest2d = upsample.upsample_nearest2d
    upsample_nearest2d_backward = upsample.upsample_nearest2d_backward
    # softmax.py
    softmax_backward = softmax.softmax_backward
    softmax_causal = softmax.softmax_causal
    softmax_causal_backward = softmax.softmax_causal_backward
    softmax = softmax.softmax  # last: the name shadows the module in this class body
    # attention.py
    attention_probs = attention.attention_probs
    scaled_dot_product_attention = attention.scaled_dot_product_attention
    attention_backward = attention.attention_backward
    # flash_attention.py
    flash_attention_backward = flash_attention.flash_attention_backward
    flash_attention = flash_attention.flash_attention  # last: the name shadows the module in this class body
    # conv.py
    conv2d = conv.conv2d
    conv_transpose2d = conv.conv_transpose2d
    conv2d_grad_input = conv.conv2d_grad_input
    conv2d_grad_weight = conv.conv2d_grad_weight
    conv2d_grad_bias = conv.conv2d_grad_bias
    # norm.py
    group_norm = norm.group_norm
    group_norm_backward = norm.group_norm_backward
    # loss.py
    mse_loss = loss.mse_loss
    # optim.py
    sgd_step = optim.sgd_step
    adam_step = optim.adam_step
    adam_multi_step = optim.adam_multi_step
    adadelta_step = optim.adadelta_step
    adagrad_step = optim.adagrad_step
    rmsprop_step = optim.rmsprop_step
    nadam_step = optim.nadam_step
    radam_step = optim.radam_step
    adamax_step = optim.adamax_step
    rprop_step = optim.rprop_step
    # batchnorm.py
    batch_norm_stats = batchnorm.batch_norm_stats
    batch_norm_apply = batchnorm.batch_norm_apply
    batch_norm_backward = batchnorm.batch_norm_backward
    # index.py
    gather_axis = index.gather_axis
    scatter_add_axis = index.scatter_add_axis
    # radix.py
    exclusive_scan_u32 = radix.exclusive_scan_u32
    sort_pairs = radix.sort_pairs
    # layernorm.py
    layer_norm = layernorm.layer_norm
    layer_norm_backward = layernorm.layer_norm_backward
    # lossfn.py
    cross_entropy_rows = lossfn.cross_entropy_rows
    cross_entropy_mean = lossfn.cross_entropy_mean
    cross_entropy_rows_backward = lossfn.cross_entropy_rows_backward
    # pool.py
    pool2d_output_size = pool.pool2d_output_size
    max_pool2d = pool.max_pool2d
    max_pool2d_backward = pool.max_pool2d_backward
    avg_pool2d = pool.avg_pool2d
    avg_pool2d_backward = pool.avg_pool2d_backward
    # random.py
    dropout = random.dropout
    # intmath.py
    broadcast_binary_int = intmath.broadcast_binary_int
    reduce_axis_int = intmath.reduce_axis_int
    matmul_int = intmath.matmul_int
    scan_int = intmath.scan_int
    cast_to_int = intmath.cast_to_int
    sort_rows = intmath.sort_rows
    index_put = intmath.index_put
    # sparse.py
    spmm = sparse.spmm
    sddmm = sparse.sddmm
    segment_sum = sparse.segment_sum
    segment_softmax = sparse.segment_softmax
    segment_softmax_backward = sparse.segment_softmax_backward


# float64 Buffers live on the host: every op method sends them to its numpy counterpart.
for _name, _fn in list(vars(Device).items()):
    if callable(_fn) and not _name.startswith("_") and _name != "pool2d_output_size":
        setattr(Device, _name, host64.dispatching(_name, _fn))
del _name, _fn


def unbound_ops() -> list[str]:
    """Public functions of the op modules that are not Device methods (should be none)."""
    missing = []
    for module in _OP_MODULES:
        for name in getattr(module, "__all__", None) or dir(module):
            fn = getattr(module, name)
            if (name.startswith("_") or isinstance(fn, type) or not callable(fn)
                    or getattr(fn, "__module__", None) != module.__name__):
                continue
            method = getattr(Device, name, None)
            if method is not fn and getattr(method, "__wrapped__", None) is not fn:
                missing.append(f"{module.__name__}.{name}")
    return missing


_default: Device | None = None
_lock = threading.Lock()


def gpu() -> Device:
    """The process-wide default device (best adapter; ANYGPU_ADAPTER / ANYGPU_BACKEND honoured)."""
    global _default
    with _lock:
        if _default is None:
            _default = Device()
        return _default
