{{ENABLE}}
// The deterministic scatter-add (ops/index.py): one thread per element [o, t, i] of out
// [outer, dim_size, inner] sums src[o, j, i] over the entries j of segment t of the sorted
// order (starts[t] .. starts[t + 1], j increasing), starting from +0.0 as torch's and
// numpy's adds into zeros do, in {{C}}; every element is written (no segment: 0).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<{{T}}>;
@group(0) @binding(2) var<storage, read> starts: array<u32>;
@group(0) @binding(3) var<storage, read> order: array<i32>;
@group(0) @binding(4) var<storage, read_write> out: array<{{T}}>;
//! include lib/element_per_thread.wgsl

fn element(e: u32) {
    let row = e / P.inner;
    let i = e - row * P.inner;
    let o = row / P.dim_size;
    let t = row - o * P.dim_size;
    let end = starts[t + 1u];
    var acc = {{C}}(0.0);
    for (var p = starts[t]; p < end; p = p + 1u) {
        acc = acc + {{C}}(src[(o * P.n_index + u32(order[p])) * P.inner + i]);
    }
    out[e] = {{T}}(acc);
}
