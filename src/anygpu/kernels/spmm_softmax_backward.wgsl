// The backward of spmm_softmax.wgsl: with y its output and g the gradient of y, over each
// segment's entries  dx = y * (g - sum over the segment of g * y). Same layout and threads.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> ptr: array<i32>;
@group(0) @binding(2) var<storage, read> perm: array<i32>;
@group(0) @binding(3) var<storage, read> y: array<f32>;
@group(0) @binding(4) var<storage, read> g: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<f32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let s = i / P.inner;
    let c = i - s * P.inner;
    let start = u32(ptr[s]);
    let end = min(u32(ptr[s + 1u]), P.entries);
    var dot = 0.0;
    for (var t = start; t < end; t = t + 1u) {
        let at = u32(perm[t]) * P.inner + c;
        dot = dot + g[at] * y[at];
    }
    for (var t = start; t < end; t = t + 1u) {
        let at = u32(perm[t]) * P.inner + c;
        out[at] = y[at] * (g[at] - dot);
    }
}
