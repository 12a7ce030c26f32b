// out[i] = f(a[i], b[i]) four elements at a time (n % 4 == 0): one vec4 load per input
// and one store per thread. f is a scalar expression of `a`, `b` (and `alpha`),
// applied to each component, so every entry of elementwise.BINARY works unchanged.
struct Params { n4: u32, alpha: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> in_a: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> in_b: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<f32>>;

// Helper functions of the scalar template (unary.wgsl / binary.wgsl), copied in by
// elementwise.py so that expressions may call them here too.
{{HELPERS}}

fn apply(a: f32, b: f32, alpha: f32) -> f32 {
    return {{EXPR}};
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n4) { return; }
    let a = in_a[i];
    let b = in_b[i];
    let alpha = P.alpha;
    out[i] = vec4<f32>(apply(a.x, b.x, alpha), apply(a.y, b.y, alpha), apply(a.z, b.z, alpha), apply(a.w, b.w, alpha));
}
