{{ENABLE}}
// The deterministic scatter-add's sums (ops/index.py): out[o, t, i] = the sum of
// src[o, j, i] over the entries j of segment t of the sorted order (keys [P.m] sorted, their
// entries `order`; j increasing within a segment), from +0.0 as torch's and numpy's adds into
// zeros do, in {{C}}. Two forms of one sum, for the smaller grid:
//   per_entry = 0: one thread per element of out [outer, dim_size, inner], segment t being
//     starts[t] .. starts[t + 1]; every element is written (no segment: 0);
//   per_entry = 1: one thread per (o, sorted place p, i); the first place of each segment
//     sums it (on while the key stays t) and writes its element, the rest return; out is
//     zero-filled by the caller, and `starts` is not read (the caller binds keys there).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<{{T}}>;
@group(0) @binding(2) var<storage, read> keys: array<u32>;
@group(0) @binding(3) var<storage, read> starts: array<u32>;
@group(0) @binding(4) var<storage, read> order: array<i32>;
@group(0) @binding(5) var<storage, read_write> out: array<{{T}}>;
//! include lib/element_per_thread.wgsl

fn segment_sum(o: u32, i: u32, first: u32, end: u32) -> {{C}} {
    var acc = {{C}}(0.0);
    for (var p = first; p < end; p = p + 1u) {
        acc = acc + {{C}}(src[(o * P.n_index + u32(order[p])) * P.inner + i]);
    }
    return acc;
}

fn element(e: u32) {
    let row = e / P.inner;
    let i = e - row * P.inner;
    if (P.per_entry == 0u) {
        let o = row / P.dim_size;
        let t = row - o * P.dim_size;
        out[e] = {{T}}(segment_sum(o, i, starts[t], starts[t + 1u]));
        return;
    }
    let o = row / P.m;
    let p = row - o * P.m;
    let t = keys[p];
    if (t >= P.dim_size || (p > 0u && keys[p - 1u] == t)) { return; }
    var end = p + 1u;
    while (end < P.m && keys[end] == t) { end = end + 1u; }
    out[(o * P.dim_size + t) * P.inner + i] = {{T}}(segment_sum(o, i, p, end));
}
