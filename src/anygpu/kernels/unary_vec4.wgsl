{{ENABLE}}
// out[i] = f(x[i]) four elements at a time (n % 4 == 0): one vec4 load and store per
// thread. f is a scalar expression of `v` (and the parameters `alpha`, `beta`),
// applied to each component, so every unary expression works unchanged.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4<{{T}}>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec4<{{OUT_T}}>>;

//! include lib/erf.wgsl

fn apply(v: {{C}}, alpha: {{C}}, beta: {{C}}) -> {{OUT_C}} {
    return {{OUT_C}}({{EXPR}});
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let v = vec4<{{C}}>(x[i]);
    let alpha = P.alpha;
    let beta = P.beta;
    out[i] = vec4<{{OUT_T}}>(vec4<{{OUT_C}}>(apply(v.x, alpha, beta), apply(v.y, alpha, beta),
                                             apply(v.z, alpha, beta), apply(v.w, alpha, beta)));
}
