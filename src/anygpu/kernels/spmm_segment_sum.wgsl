{{ENABLE}}
// Sum of the entries of each segment (coalescing duplicate indices, torch.sparse.sum over
// sparse dims): entries are rows of `inner` elements of `values`, listed in segment order
// through perm (ptr[s] <= t < ptr[s + 1], entry perm[t]), and
//   out[s, c] = sum over t in segment s of values[perm[t], c]
// in entry order ({{C}}: integers exactly, floats in f32). One thread per output element.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> ptr: array<i32>;
@group(0) @binding(2) var<storage, read> perm: array<i32>;
@group(0) @binding(3) var<storage, read> values: array<{{T}}>;
@group(0) @binding(4) var<storage, read_write> out: array<{{T}}>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let s = i / P.inner;
    let c = i - s * P.inner;
    let end = min(u32(ptr[s + 1u]), P.entries);
    var acc = {{C}}(0);
    for (var t = u32(ptr[s]); t < end; t = t + 1u) {
        acc = acc + {{C}}(values[u32(perm[t]) * P.inner + c]);
    }
    out[i] = {{T}}(acc);
}
