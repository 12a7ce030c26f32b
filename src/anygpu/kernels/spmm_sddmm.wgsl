// Sampled dense-dense product (the gradient of a sparse matrix's values in A @ X): for each
// entry t, listed in segment order as spmm.wgsl lists them,
//   out[perm[t]] = dot(a[seg[t], :], b[other[t], :])      (rows of `cols` elements)
// with a = d(A @ X) [segments, cols] and b = X [b_rows, cols]: the gradient lands at the
// entry's own position in `values`. One thread per entry; the dot runs in f32, in order.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> perm: array<i32>;
@group(0) @binding(2) var<storage, read> seg: array<i32>;
@group(0) @binding(3) var<storage, read> other: array<i32>;
@group(0) @binding(4) var<storage, read> a: array<f32>;
@group(0) @binding(5) var<storage, read> b: array<f32>;
@group(0) @binding(6) var<storage, read_write> out: array<f32>;
//! include lib/element_per_thread.wgsl

fn element(t: u32) {
    let row_a = u32(seg[t]);
    let row_b = u32(other[t]);
    var acc = 0.0;
    if (row_a < P.a_rows && row_b < P.b_rows) {
        for (var c = 0u; c < P.cols; c = c + 1u) {
            acc = acc + a[row_a * P.cols + c] * b[row_b * P.cols + c];
        }
    }
    out[u32(perm[t])] = acc;
}
