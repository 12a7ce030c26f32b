"""Indexing by integer tensors (Layer 0): gather along an axis and its scatter-add backward.

Both view their tensors as [outer, dim_size, inner] around the indexed axis. An index
buffer is int32 and holds either one entry per output element (torch.gather) or one
entry per selected row of `inner` elements, shared by every `outer` (index_select, embedding)."""

from __future__ import annotations

from ..runtime import Params, load_shader
from ._common import check_buffer, grid_1d
from .elementwise import source
from .nd import words

__all__ = ["gather_axis", "scatter_add_axis"]

GATHER_PARAMS = Params("n: u32", "n_index: u32", "inner: u32", "dim_size: u32", "per_element: u32")
_MISSING = {"u32": "0x7fc00000u", "f16": "f16(0.0)"}  # NaN's bits as a word; f16 has no NaN literal


def _check_index(op: str, index, outer: int, n_index: int, inner: int, per_element: bool) -> None:
    if per_element:
        check_buffer(op, "index", index, outer * n_index * inner, "outer*n_index*inner")
    else:
        check_buffer(op, "index", index, n_index, "n_index")
    if index.dtype != "i32":
        raise ValueError(f"{op}: index must be an int32 buffer, got {index.dtype}")


def gather_axis(dev, x, index, outer: int, dim_size: int, n_index: int, inner: int,
                per_element: bool = False):
    """out[o, j, i] = x[o, index[..], i] for x [outer, dim_size, inner] -> out [outer, n_index, inner].

    per_element: index has shape [outer, n_index, inner] (torch.gather); otherwise
    [n_index] and each entry selects a whole row of `inner` for every o (index_select).
    Negative indices count from the end; indices out of range give NaN. Keeps x's dtype."""
    check_buffer("gather", "x", x, outer * dim_size * inner, "outer*dim_size*inner")
    _check_index("gather", index, outer, n_index, inner, per_element)
    n = outer * n_index * inner
    out = dev.empty(n, x.dtype)
    if n == 0:
        return out
    if dim_size == 0:
        raise ValueError(f"gather: cannot index into an empty axis ({n_index} indices into size 0)")
    dtype = words(x.dtype)
    kernel = dev.kernel("gather", source("gather.wgsl", "", GATHER_PARAMS, dtype, MISSING=_MISSING[dtype]),
                        2, 1, GATHER_PARAMS.format())
    dev.launch(kernel, [x, index], [out], (n, n_index, inner, dim_size, int(per_element)), grid_1d(dev, n))
    return out


def scatter_add_axis(dev, src, index, outer: int, dim_size: int, n_index: int, inner: int,
                     per_element: bool = False, skip: int = -1):
    """The backward of gather_axis: out [outer, dim_size, inner] (new, zero-filled) with
    out[o, index[..], i] += src[o, j, i]. Entries whose index is `skip` (after negative
    indices are wrapped) add nothing. Float adds run in whatever order the GPU picks."""
    check_buffer("scatter_add", "src", src, outer * n_index * inner, "outer*n_index*inner")
    _check_index("scatter_add", index, outer, n_index, inner, per_element)
    out = dev.alloc(outer * dim_size * inner)
    n = outer * n_index * inner
    if n == 0 or dim_size == 0:
        return out
    kernel = dev.kernel("scatter_add", load_shader("scatter_add.wgsl"), 2, 1, "IIIIIi")
    dev.launch(kernel, [src, index], [out],
               (n, n_index, inner, dim_size, int(per_element), int(skip)), grid_1d(dev, n))
    return out
