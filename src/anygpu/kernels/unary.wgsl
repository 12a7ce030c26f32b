{{ENABLE}}
// out[i] = f(x[i]) for a scalar expression f of `v` (and the parameters `alpha`, `beta`),
// computed in {{C}} on elements stored as {{T}}, written as {{OUT_T}}.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{OUT_T}}>;

//! include lib/erf.wgsl

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let v = {{C}}(x[i]);
    let alpha = P.alpha;
    let beta = P.beta;
    out[i] = {{OUT_T}}({{EXPR}});
}
