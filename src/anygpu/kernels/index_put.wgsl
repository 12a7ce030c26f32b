// dst[positions[i]] = src[i] for every i < n: writes at flat positions (32-bit words of any
// dtype), in place. Repeated positions keep one of their values (which one is unspecified,
// as in torch's index_put without accumulate).
struct Params { n: u32, dst_len: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> positions: array<i32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let p = positions[i];
    if (p >= 0 && u32(p) < P.dst_len) { dst[u32(p)] = src[i]; }
}
