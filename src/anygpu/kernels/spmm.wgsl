// Sparse x dense product over segments: the entries t of segment s (ptr[s] <= t < ptr[s + 1])
// are one row of the sparse matrix (CSR rows of A for A @ X, or the columns of A, its
// transpose's rows, for A^T @ X). For each output element (s, c):
//   out[s, c] = sum over t in segment s of values[perm[t]] * dense[other[t], c]
// perm[t] is the entry's position in `values` (entries are listed in segment order by the
// host, so the values never move); other[t] is its column (the dense row it multiplies).
// One thread per output element, c fastest, so neighbouring threads read neighbouring dense
// elements; sums run in entry order, in f32. An `other` out of range adds nothing.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> ptr: array<i32>;
@group(0) @binding(2) var<storage, read> perm: array<i32>;
@group(0) @binding(3) var<storage, read> other: array<i32>;
@group(0) @binding(4) var<storage, read> values: array<f32>;
@group(0) @binding(5) var<storage, read> dense: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let s = i / P.cols;
    let c = i - s * P.cols;
    let end = min(u32(ptr[s + 1u]), P.nnz);
    var acc = 0.0;
    for (var t = u32(ptr[s]); t < end; t = t + 1u) {
        let row = u32(other[t]);
        if (row < P.dense_rows) {
            acc = acc + values[u32(perm[t])] * dense[row * P.cols + c];
        }
    }
    out[i] = acc;
}
