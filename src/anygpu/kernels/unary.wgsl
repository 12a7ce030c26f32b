// out[i] = f(x[i]) for a scalar expression f of `v` (and the parameter `alpha`).
struct Params { n: u32, alpha: f32, beta: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let v = x[i];
    let alpha = P.alpha;
    let beta = P.beta;
    out[i] = {{EXPR}};
}
