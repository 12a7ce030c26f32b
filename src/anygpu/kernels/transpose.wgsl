// Swap the middle axes of a [outer, d0, d1, inner] array: out[o, j, i, k] = a[o, i, j, k].
// One thread per output element, so the writes are contiguous.
struct Params { n: u32, d0: u32, d1: u32, inner: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 256u;
    if (idx >= P.n) { return; }
    let k = idx % P.inner;
    let j_i_o = idx / P.inner;     // (o * d1 + j) * d0 + i
    let i = j_i_o % P.d0;
    let j = (j_i_o / P.d0) % P.d1;
    let o = j_i_o / (P.d0 * P.d1);
    out[idx] = a[((o * P.d0 + i) * P.d1 + j) * P.inner + k];
}
