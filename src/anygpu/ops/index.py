"""Indexing by integer tensors (Layer 0): gather along an axis and its scatter-add backward.

Both view their tensors as [outer, dim_size, inner] around the indexed axis. An index
buffer is int32 and holds either one entry per output element (torch.gather) or one
entry per selected row of `inner` elements, shared by every `outer` (index_select, embedding).
The scatter-add sums in a fixed order (increasing j), so it gives the same bits every run."""

from __future__ import annotations

from ..runtime import Params, load_shader
from ._common import check_buffer, grid_1d
from .elementwise import source
from .nd import words
from .radix import sort_pairs

__all__ = ["gather_axis", "scatter_add_axis"]

GATHER_PARAMS = Params("n: u32", "n_index: u32", "inner: u32", "dim_size: u32", "per_element: u32")
SCATTER_KEY_PARAMS = Params("n: u32", "n_index: u32", "inner: u32", "dim_size: u32", "per_element: u32",
                            "skip: i32", "buckets: u32")
STARTS_PARAMS = Params("n: u32", "m: u32")
SEGMENT_PARAMS = Params("n: u32", "n_index: u32", "inner: u32", "dim_size: u32", "m: u32", "per_entry: u32")
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
    """The backward of gather_axis: out [outer, dim_size, inner] (src's dtype) with
    out[o, index[..], i] = the sum of src[o, j, i] over the entries j that pick it, 0 where
    none does. Entries whose index is `skip` (after negative indices are wrapped) or out of
    range add nothing.

    Deterministic, the same bits on every run: the index entries are sorted by the output
    row (per_element: the output position) they pick, stably (radix.sort_pairs), and each
    output element's entries are added by one thread in increasing j, starting from +0.0, in
    f32 (f16 too, rounded once). So a result equals a sequential float32 loop over j into zeros,
    `np.add.at(out, ..., src)`, bit for bit (as torch.use_deterministic_algorithms asks)."""
    check_buffer("scatter_add", "src", src, outer * n_index * inner, "outer*n_index*inner")
    _check_index("scatter_add", index, outer, n_index, inner, per_element)
    if src.dtype not in ("f32", "f16"):
        raise ValueError(f"scatter_add: src must be an f32 or f16 buffer, got {src.dtype}")
    n = outer * n_index * inner
    total = outer * dim_size * inner
    if n == 0 or total == 0:
        return dev.alloc(total, src.dtype)
    if total >= 2**32 - 1:
        raise ValueError(f"scatter_add: {total} output elements, at most {2**32 - 2}")
    entries = n if per_element else n_index
    buckets = total if per_element else dim_size  # keys of real entries are below it
    keys_source = load_shader("scatter_add.wgsl", **SCATTER_KEY_PARAMS.subs())
    kernel = dev.kernel("scatter_add_keys", keys_source, 1, 2, SCATTER_KEY_PARAMS.format())
    keys, order = dev.empty(entries, "u32"), dev.empty(entries, "i32")
    dev.launch(kernel, [index], [keys, order],
               (entries, n_index, inner, dim_size, int(per_element), int(skip), buckets), grid_1d(dev, entries))
    keys, order = sort_pairs(dev, keys, order, entries, buckets.bit_length())
    if per_element:  # each entry is one element: the output is one flat axis of `total` rows
        outer, dim_size, n_index, inner = 1, total, n, 1
    # One thread per output element, or (zero-filled first) one per entry and column where
    # those are fewer: many rows that no entry picks (a large vocabulary). The first looks its
    # segment up in `starts`, the second finds it by the keys themselves.
    per_entry = outer * entries * inner < total
    if per_entry:
        threads, starts, out = outer * entries * inner, keys, dev.alloc(total, src.dtype)
    else:
        threads, starts, out = total, dev.empty(buckets + 1, "u32"), dev.empty(total, src.dtype)
        kernel = dev.kernel("scatter_add_starts", load_shader("scatter_add_starts.wgsl", **STARTS_PARAMS.subs()),
                            1, 1, STARTS_PARAMS.format())
        dev.launch(kernel, [keys], [starts], (buckets + 1, entries), grid_1d(dev, buckets + 1))
    kernel = dev.kernel("scatter_add", load_shader("scatter_add_segments.wgsl", src.dtype,
                                                   **SEGMENT_PARAMS.subs()), 4, 1, SEGMENT_PARAMS.format())
    dev.launch(kernel, [src, keys, starts, order], [out], (threads, n_index, inner, dim_size, entries, int(per_entry)),
               grid_1d(dev, threads))
    return out
