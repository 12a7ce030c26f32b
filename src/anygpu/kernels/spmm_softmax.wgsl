// torch.sparse.softmax: a softmax over the entries of each segment (the specified elements of
// one row, or one column; unspecified elements count as -inf, so they take no share). Entries
// are rows of `inner` elements of x, listed in segment order through perm; one thread per
// (segment, c) makes three passes: max, sum of exp(x - max), then each exp over the sum.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> ptr: array<i32>;
@group(0) @binding(2) var<storage, read> perm: array<i32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let s = i / P.inner;
    let c = i - s * P.inner;
    let start = u32(ptr[s]);
    let end = min(u32(ptr[s + 1u]), P.entries);
    if (start >= end) { return; }
    var top = x[u32(perm[start]) * P.inner + c];
    for (var t = start + 1u; t < end; t = t + 1u) {
        top = max(top, x[u32(perm[t]) * P.inner + c]);
    }
    var total = 0.0;
    for (var t = start; t < end; t = t + 1u) {
        total = total + exp(x[u32(perm[t]) * P.inner + c] - top);
    }
    for (var t = start; t < end; t = t + 1u) {
        let at = u32(perm[t]) * P.inner + c;
        out[at] = exp(x[at] - top) / total;
    }
}
