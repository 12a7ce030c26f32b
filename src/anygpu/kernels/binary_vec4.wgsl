{{ENABLE}}
// out[i] = f(a[i], b[i]) four elements at a time (n % 4 == 0): one vec4 load per input
// and one store per thread. f is a scalar expression of `a`, `b` (and `alpha`),
// applied to each component, so every binary expression works unchanged.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> in_a: array<vec4<{{T}}>>;
@group(0) @binding(2) var<storage, read> in_b: array<vec4<{{T}}>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<{{OUT_T}}>>;

//! include lib/erf.wgsl
//! include lib/int.wgsl

fn apply(a: {{C}}, b: {{C}}, alpha: {{C}}) -> {{OUT_C}} {
    return {{OUT_C}}({{EXPR}});
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let a = vec4<{{C}}>(in_a[i]);
    let b = vec4<{{C}}>(in_b[i]);
    let alpha = P.alpha;
    out[i] = vec4<{{OUT_T}}>(vec4<{{OUT_C}}>(apply(a.x, b.x, alpha), apply(a.y, b.y, alpha),
                                             apply(a.z, b.z, alpha), apply(a.w, b.w, alpha)));
}
