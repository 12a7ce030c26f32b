// Concatenate along the inner axis: a [outer, a_inner] and b [outer, b_inner] give
// out [outer, a_inner + b_inner]. One thread per output element.
struct Params { n: u32, a_inner: u32, b_inner: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 256u;
    if (idx >= P.n) { return; }
    let width = P.a_inner + P.b_inner;
    let row = idx / width;
    let col = idx % width;
    if (col < P.a_inner) {
        out[idx] = a[row * P.a_inner + col];
    } else {
        out[idx] = b[row * P.b_inner + col - P.a_inner];
    }
}
