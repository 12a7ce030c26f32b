// One pass of ops/radix.py's LSD radix sort, second half: key i (block i / 256, rank as
// radix_count.wgsl found) and its value go to place offsets[digit * n_blocks + block] + rank,
// offsets being the exclusive scan of radix_count's hist. Stable: equal digits keep their order.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> keys: array<u32>;
@group(0) @binding(2) var<storage, read> values: array<i32>;
@group(0) @binding(3) var<storage, read> rank: array<u32>;
@group(0) @binding(4) var<storage, read> offsets: array<u32>;
@group(0) @binding(5) var<storage, read_write> keys_out: array<u32>;
@group(0) @binding(6) var<storage, read_write> values_out: array<i32>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let key = keys[i];
    let digit = (key >> P.shift) & (P.digits - 1u);
    let at = offsets[digit * P.n_blocks + i / 256u] + rank[i];
    keys_out[at] = key;
    values_out[at] = values[i];
}
