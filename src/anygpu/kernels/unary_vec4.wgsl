// out[i] = f(x[i]) four elements at a time (n % 4 == 0): one vec4 load and store per
// thread. f is a scalar expression of `v` (and the parameters `alpha`, `beta`),
// applied to each component, so every entry of elementwise.UNARY works unchanged.
struct Params { n4: u32, alpha: f32, beta: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<f32>>;

// Helper functions of the scalar template (unary.wgsl / binary.wgsl), copied in by
// elementwise.py so that expressions may call them here too.
{{HELPERS}}

fn apply(v: f32, alpha: f32, beta: f32) -> f32 {
    return {{EXPR}};
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n4) { return; }
    let v = x[i];
    let alpha = P.alpha;
    let beta = P.beta;
    out[i] = vec4<f32>(apply(v.x, alpha, beta), apply(v.y, alpha, beta), apply(v.z, alpha, beta), apply(v.w, alpha, beta));
}
