// The backward of gather: out[o, index[k], i] += src[o, j, i] over every (o, j, i), with
// k as in gather.wgsl. `out` ([outer, dim_size, inner], zero-filled by the caller) is
// added to with a compare-and-swap loop, since WGSL has no float atomics; entries whose
// index equals `skip` (embedding's padding_idx, -1 for none) or is out of range add nothing.
struct Params { n: u32, n_index: u32, inner: u32, dim_size: u32, per_element: u32, skip: i32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> index: array<i32>;
@group(0) @binding(3) var<storage, read_write> out: array<atomic<u32>>;
//! include lib/index_axis.wgsl

fn atomic_add_f32(addr: u32, value: f32) {
    var old = atomicLoad(&out[addr]);
    loop {
        let swapped = atomicCompareExchangeWeak(&out[addr], old, bitcast<u32>(bitcast<f32>(old) + value));
        if (swapped.exchanged) { break; }
        old = swapped.old_value;
    }
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let at = indexed_at(i);
    if (!at.valid || at.t == P.skip) { return; }
    let value = src[i];
    if (value == 0.0) { return; }
    atomic_add_f32(at.at, value);
}
