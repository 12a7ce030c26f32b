// out[i] = cond[i] != 0 ? a[i] : b[i] (equal lengths; broadcasting is done by the caller).
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> cond: array<f32>;
@group(0) @binding(2) var<storage, read> in_a: array<f32>;
@group(0) @binding(3) var<storage, read> in_b: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    out[i] = select(in_b[i], in_a[i], cond[i] != 0.0);
}
