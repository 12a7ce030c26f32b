// out[i] = f(a[i], b[i]) for a scalar expression f of `a`, `b` (and `alpha`).
struct Params { n: u32, alpha: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> in_a: array<f32>;
@group(0) @binding(2) var<storage, read> in_b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let a = in_a[i];
    let b = in_b[i];
    let alpha = P.alpha;
    out[i] = {{EXPR}};
}
