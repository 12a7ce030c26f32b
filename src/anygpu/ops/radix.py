"""Sorting and scanning of u32 words on the GPU (Layer 0): a stable LSD radix sort of keys
carrying an i32 payload, and the exclusive prefix sum it is built on.

Both are deterministic: integer work only, each element's place computed, never raced for.
The sort takes 8 key bits a pass (only as many passes as `key_bits` needs); a pass counts
each block of 256 keys' digits and ranks every key among the equal digits before it in its
block (radix_count.wgsl), scans the [digits, blocks] counts (exclusive_scan_u32), and moves
each key to its digit's offset plus its rank (radix_scatter.wgsl)."""

from __future__ import annotations

from ..runtime import Params, load_shader
from ._common import WORKGROUP_1D, check_buffer, grid_1d

__all__ = ["exclusive_scan_u32", "sort_pairs"]

RADIX_BITS = 8
BLOCK = WORKGROUP_1D  # keys per block of a pass
SCAN_BLOCK = 4 * WORKGROUP_1D  # elements per block of a scan level (4 a thread)
PASS_PARAMS = Params("n: u32", "n_blocks: u32", "shift: u32", "digits: u32")
SCAN_PARAMS = Params("n: u32", "n_blocks: u32")


def _check_words(op: str, name: str, buf, n: int, dtype: str) -> None:
    check_buffer(op, name, buf, n, "n")
    if buf.dtype != dtype:
        raise ValueError(f"{op}: {name} must hold {dtype} elements, got {buf.dtype}")


def exclusive_scan_u32(dev, x, n: int):
    """y [n] u32 with y[i] = x[0] + ... + x[i-1] (mod 2**32) for x [n] u32: each block of 1024
    scanned in workgroup memory, the blocks' totals scanned the same way (recursively, one level
    per factor of 1024) and added back."""
    _check_words("exclusive_scan_u32", "x", x, n, "u32")
    y = dev.empty(n, "u32")
    if n == 0:
        return y
    n_blocks = -(-n // SCAN_BLOCK)
    sums = dev.empty(n_blocks, "u32")
    kernel = dev.kernel("radix_scan", load_shader("radix_scan.wgsl", **SCAN_PARAMS.subs()), 1, 2,
                        SCAN_PARAMS.format())
    dev.launch(kernel, [x], [y, sums], (n, n_blocks), dev.grid(n_blocks))
    if n_blocks > 1:
        block_offsets = exclusive_scan_u32(dev, sums, n_blocks)
        add = dev.kernel("radix_scan_add", load_shader("radix_scan_add.wgsl", **SCAN_PARAMS.subs()), 1, 1,
                         SCAN_PARAMS.format())
        dev.launch(add, [block_offsets], [y], (n, n_blocks), grid_1d(dev, n))
    return y


def sort_pairs(dev, keys, values, n: int, key_bits: int = 32):
    """(sorted_keys, sorted_values): keys [n] u32 in increasing order of their low `key_bits`
    bits (higher bits are carried but not compared: keep keys below 2**key_bits), each value
    [n] i32 moved with its key. Stable: equal keys keep their input order, so values = arange(n)
    gives numpy's argsort(kind='stable'). Returns new buffers; ceil(key_bits / 8) passes."""
    _check_words("sort_pairs", "keys", keys, n, "u32")
    _check_words("sort_pairs", "values", values, n, "i32")
    if int(key_bits) != key_bits or not 0 <= key_bits <= 32:
        raise ValueError(f"sort_pairs: key_bits must be an integer in [0, 32], got {key_bits!r}")
    if n == 0 or key_bits == 0:
        return dev.copy(keys), dev.copy(values)
    n_blocks = -(-n // BLOCK)
    count = dev.kernel("radix_count", load_shader("radix_count.wgsl", **PASS_PARAMS.subs()), 1, 2,
                       PASS_PARAMS.format())
    scatter = dev.kernel("radix_scatter", load_shader("radix_scatter.wgsl", **PASS_PARAMS.subs()), 4, 2,
                         PASS_PARAMS.format())
    rank = dev.empty(n, "u32")
    for shift in range(0, key_bits, RADIX_BITS):
        digits = 1 << min(RADIX_BITS, key_bits - shift)
        params = (n, n_blocks, shift, digits)
        hist = dev.empty(digits * n_blocks, "u32")
        dev.launch(count, [keys], [hist, rank], params, dev.grid(n_blocks))
        offsets = exclusive_scan_u32(dev, hist, digits * n_blocks)
        keys_out, values_out = dev.empty(n, "u32"), dev.empty(n, "i32")
        dev.launch(scatter, [keys, values, rank, offsets], [keys_out, values_out], params, grid_1d(dev, n))
        keys, values = keys_out, values_out
    return keys, values
