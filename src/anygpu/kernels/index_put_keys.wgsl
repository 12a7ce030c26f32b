// The sort keys of a deterministic index_put (ops/intmath.py): keys[i] = positions[i] where it
// lies in [0, dst_len), else dst_len (a key past every real one: written nowhere), and
// order[i] = i, the payload the stable sort carries.
struct Params { n: u32, dst_len: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> positions: array<i32>;
@group(0) @binding(2) var<storage, read_write> keys: array<u32>;
@group(0) @binding(3) var<storage, read_write> order: array<i32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let p = positions[i];
    keys[i] = select(P.dst_len, u32(p), p >= 0 && u32(p) < P.dst_len);
    order[i] = i32(i);
}
