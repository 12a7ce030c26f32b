"""Layer 0: sparse matrices as segments of entries (the kernels behind anygpu.sparse).

A sparse matrix's entries are grouped into segments: the entries of one row (CSR), or of one
column (the rows of its transpose), or the duplicates of one index (coalescing). The host
lists them in segment order once per structure, as i32 Buffers:

- ptr   [segments + 1]: the entries of segment s are t with ptr[s] <= t < ptr[s + 1]
- perm  [entries]: the position of entry t in `values` (the values never move)
- seg   [entries]: the segment of entry t (the sampled product's output row)
- other [entries]: the other index of entry t (the dense row it multiplies)

Every op here reads its values through perm, so one values Buffer serves the row and the
column segments of a matrix (A @ X and its gradient A^T @ dY). Sums run in entry order, in
f32 (integers exactly). Index contents are the caller's to check (anygpu.sparse checks them
on the host when the tensor is made); an out-of-range row in `other` adds nothing."""

from __future__ import annotations

from ..runtime import Params, load_shader
from ._common import check_buffer, grid_1d

__all__ = ["spmm", "sddmm", "segment_sum", "segment_softmax", "segment_softmax_backward"]

SPMM_PARAMS = Params("n: u32", "cols: u32", "nnz: u32", "dense_rows: u32")
SDDMM_PARAMS = Params("n: u32", "cols: u32", "a_rows: u32", "b_rows: u32")
SEGMENT_PARAMS = Params("n: u32", "inner: u32", "entries: u32")


def _check_index(op: str, name: str, buf, n: int, formula: str) -> None:
    check_buffer(op, name, buf, n, formula)
    if buf.dtype != "i32":
        raise ValueError(f"{op}: {name} must be an i32 buffer, got {buf.dtype}")


def _check_segments(op: str, ptr, perm, segments: int, entries: int) -> None:
    if int(segments) != segments or segments < 0 or int(entries) != entries or entries < 0:
        raise ValueError(f"{op}: segments and entries must be non-negative integers, got {segments!r}, {entries!r}")
    _check_index(op, "ptr", ptr, segments + 1, "segments+1")
    _check_index(op, "perm", perm, entries, "entries")


def _check_f32(op: str, **buffers) -> None:
    for name, buf in buffers.items():
        check_buffer(op, name, buf)
        if buf.dtype != "f32":
            raise ValueError(f"{op}: {name} must be an f32 buffer, got {buf.dtype}")


def spmm(dev, ptr, perm, other, values, dense, segments: int, dense_rows: int, cols: int):
    """out [segments, cols]: out[s, :] = sum over the entries t of segment s of
    values[perm[t]] * dense[other[t], :], with dense [dense_rows, cols] (f32)."""
    entries = perm.len if hasattr(perm, "len") else 0
    _check_segments("spmm", ptr, perm, segments, entries)
    _check_index("spmm", "other", other, entries, "entries")
    _check_f32("spmm", values=values, dense=dense)
    check_buffer("spmm", "dense", dense, dense_rows * cols, "dense_rows*cols")
    if values.len < entries:
        raise ValueError(f"spmm: values has {values.len} elements, expected at least entries = {entries}")
    n = segments * cols
    if n == 0 or entries == 0:
        return dev.alloc(n)
    out = dev.empty(n)
    kernel = dev.kernel("spmm", load_shader("spmm.wgsl", PARAMS=SPMM_PARAMS.wgsl()), 5, 1, SPMM_PARAMS.format())
    dev.launch(kernel, [ptr, perm, other, values, dense], [out], (n, cols, entries, dense_rows), grid_1d(dev, n))
    return out


def sddmm(dev, perm, seg, other, a, b, a_rows: int, b_rows: int, cols: int):
    """out [entries]: out[perm[t]] = dot(a[seg[t], :], b[other[t], :]) for a [a_rows, cols]
    and b [b_rows, cols] (f32): the gradient of the values of a sparse product."""
    entries = perm.len if hasattr(perm, "len") else 0
    _check_index("sddmm", "perm", perm, entries, "entries")
    _check_index("sddmm", "seg", seg, entries, "entries")
    _check_index("sddmm", "other", other, entries, "entries")
    _check_f32("sddmm", a=a, b=b)
    check_buffer("sddmm", "a", a, a_rows * cols, "a_rows*cols")
    check_buffer("sddmm", "b", b, b_rows * cols, "b_rows*cols")
    if entries == 0:
        return dev.empty(0)
    if cols == 0:
        return dev.alloc(entries)
    out = dev.empty(entries)
    kernel = dev.kernel("sddmm", load_shader("spmm_sddmm.wgsl", PARAMS=SDDMM_PARAMS.wgsl()), 5, 1,
                        SDDMM_PARAMS.format())
    dev.launch(kernel, [perm, seg, other, a, b], [out], (entries, cols, a_rows, b_rows), grid_1d(dev, entries))
    return out


def segment_sum(dev, ptr, perm, values, segments: int, inner: int):
    """out [segments, inner]: the sum of each segment's entries, rows of `inner` elements of
    values [entries, inner] (f32 or i32; integers summed exactly)."""
    entries = perm.len if hasattr(perm, "len") else 0
    _check_segments("segment_sum", ptr, perm, segments, entries)
    check_buffer("segment_sum", "values", values, entries * inner, "entries*inner")
    if values.dtype not in ("f32", "i32"):
        raise ValueError(f"segment_sum: values must be an f32 or i32 buffer, got {values.dtype}")
    n = segments * inner
    if n == 0 or entries == 0:
        return dev.alloc(n, values.dtype)
    out = dev.empty(n, values.dtype)
    source = load_shader("spmm_segment_sum.wgsl", values.dtype, PARAMS=SEGMENT_PARAMS.wgsl())
    kernel = dev.kernel("segment_sum", source, 3, 1, SEGMENT_PARAMS.format())
    dev.launch(kernel, [ptr, perm, values], [out], (n, inner, entries), grid_1d(dev, n))
    return out


def segment_softmax(dev, ptr, perm, x, segments: int, inner: int):
    """out [entries, inner]: the softmax of x [entries, inner] (f32) over the entries of each
    segment, per inner column. Every entry belongs to one segment."""
    entries = perm.len if hasattr(perm, "len") else 0
    _check_segments("sparse_softmax", ptr, perm, segments, entries)
    _check_f32("sparse_softmax", x=x)
    check_buffer("sparse_softmax", "x", x, entries * inner, "entries*inner")
    out = dev.empty(entries * inner)
    n = segments * inner
    if n == 0 or entries == 0:
        return out
    kernel = dev.kernel("sparse_softmax", load_shader("spmm_softmax.wgsl", PARAMS=SEGMENT_PARAMS.wgsl()), 3, 1,
                        SEGMENT_PARAMS.format())
    dev.launch(kernel, [ptr, perm, x], [out], (n, inner, entries), grid_1d(dev, n))
    return out


def segment_softmax_backward(dev, ptr, perm, y, grad_out, segments: int, inner: int):
    """The gradient of segment_softmax's input: y * (g - sum over the segment of g * y)."""
    entries = perm.len if hasattr(perm, "len") else 0
    _check_segments("sparse_softmax_backward", ptr, perm, segments, entries)
    _check_f32("sparse_softmax_backward", y=y, grad_out=grad_out)
    check_buffer("sparse_softmax_backward", "y", y, entries * inner, "entries*inner")
    check_buffer("sparse_softmax_backward", "grad_out", grad_out, entries * inner, "entries*inner")
    out = dev.empty(entries * inner)
    n = segments * inner
    if n == 0 or entries == 0:
        return out
    kernel = dev.kernel("sparse_softmax_backward",
                        load_shader("spmm_softmax_backward.wgsl", PARAMS=SEGMENT_PARAMS.wgsl()), 4, 1,
                        SEGMENT_PARAMS.format())
    dev.launch(kernel, [ptr, perm, y, grad_out], [out], (n, inner, entries), grid_1d(dev, n))
    return out
