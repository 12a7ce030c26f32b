"""Shape views: reshape, permute and expand, and torch's stride rules for `view`."""

from __future__ import annotations



from ..autograd.rules import backward as rule
from ..ops import gpu
from ..ops.nd import contiguous_strides, numel

from .core import Tensor, _dim
from .recording import _record, _view_host


def reshape(x: Tensor, shape) -> Tensor:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    if shape.count(-1) > 1:
        raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
    if -1 in shape:
        known = numel(s for s in shape if s != -1)
        if known == 0 or x.numel() % known:
            raise ValueError(f"reshape: shape {shape} is invalid for input of size {x.numel()} (shape {x.shape})")
        shape = tuple(x.numel() // known if s == -1 else s for s in shape)
    if numel(shape) != x.numel() or any(s < 0 for s in shape):
        raise ValueError(f"reshape: shape {shape} is invalid for input of size {x.numel()} (shape {x.shape})")
    out = Tensor(x._buf, shape, x.dtype)
    out._host = _view_host(x, None if x._host is None else x._host.reshape(shape))
    return _record("reshape", out, (x,), rule("reshape", None))


def _torch_contiguous(shape, strides) -> bool:
    """torch's is_contiguous: every dim of size > 1 has the row-major stride."""
    expected = 1
    for size, stride in reversed(list(zip(shape, strides))):
        if size != 1:
            if stride != expected:
                return False
            expected *= size
    return True


def _view_strides(shape, strides, new_shape):
    """The strides of `new_shape` viewing memory laid out as (shape, strides), or None when
    no view exists (torch's rule: each group of old dims merged or split must be
    contiguous within itself). Size-1 dims take any stride."""
    if numel(shape) == 0:
        return tuple(contiguous_strides(new_shape))
    old = [(size, stride) for size, stride in zip(shape, strides) if size != 1]
    new = list(new_shape)
    out = [1] * len(new)
    oi = ni = 0
    while oi < len(old) and ni < len(new):
        new_size, old_size = new[ni], old[oi][0]
        nj, oj = ni + 1, oi + 1
        while new_size != old_size:
            if new_size < old_size:
                new_size *= new[nj]
                nj += 1
            else:
                old_size *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        oi, ni = oj, nj
    return tuple(out)


def permute(x: Tensor, dims) -> Tensor:
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    dims = tuple(_dim("permute", d, x.ndim) for d in dims)
    if sorted(dims) != list(range(x.ndim)):
        raise ValueError(f"permute: dims {dims} are not a permutation of {x.ndim} dims")
    if dims == tuple(range(x.ndim)):
        return x
    dev = gpu()
    strides = contiguous_strides(x.shape)
    shape = tuple(x.shape[d] for d in dims)
    out = Tensor(dev.strided_gather(x._buf, shape, tuple(strides[d] for d in dims)), shape, x.dtype)
    permuted = tuple((x._torch_strides or strides)[d] for d in dims)
    out._torch_strides = None if _torch_contiguous(shape, permuted) else permuted
    return _record("permute", out, (x,), rule("permute", dev, x.shape, dims))


def expand(x: Tensor, shape) -> Tensor:
    pad = len(shape) - x.ndim
    if pad < 0:
        raise ValueError(f"expand: shape {tuple(shape)} has fewer dims than the tensor of shape {x.shape}")
    asked = tuple(shape)
    shape = tuple(x.shape[i - pad] if s == -1 and i >= pad else s for i, s in enumerate(asked))
    if any(s < 0 or (d >= pad and x.shape[d - pad] not in (1, s)) for d, s in enumerate(shape)):
        raise ValueError(f"expand: cannot expand shape {x.shape} to {asked}")
    dev = gpu()
    strides = [0] * pad + [0 if s == 1 else st for s, st in zip(x.shape, contiguous_strides(x.shape))]
    out = Tensor(dev.strided_gather(x._buf, shape, strides), shape, x.dtype)
    torch_strides = tuple([0] * pad + [0 if old == 1 and new != 1 else st for old, new, st in zip(
        x.shape, shape[pad:], x._torch_strides or contiguous_strides(x.shape))])
    out._torch_strides = None if _torch_contiguous(shape, torch_strides) else torch_strides
    return _record("expand", out, (x,), rule("expand", dev, x.shape, shape))
