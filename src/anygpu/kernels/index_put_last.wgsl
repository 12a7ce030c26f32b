// The writes of a deterministic index_put (ops/intmath.py), over its keys sorted stably with
// their order: the last entry of each run of one key (the latest i of that position) writes
// dst[key] = src[i]; every other entry, and the runs keyed past dst, write nothing. So each
// position gets the value a sequential loop leaves there, once, whatever the schedule.
struct Params { n: u32, dst_len: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read> keys: array<u32>;
@group(0) @binding(3) var<storage, read> order: array<i32>;
@group(0) @binding(4) var<storage, read_write> dst: array<u32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let key = keys[i];
    let last = i + 1u == P.n || keys[i + 1u] != key;
    if (last && key < P.dst_len) { dst[key] = src[u32(order[i])]; }
}
