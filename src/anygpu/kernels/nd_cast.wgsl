{{ENABLE}}
// out[i] = x[i] converted from {{T}} (computed as {{C}}) to {{OUT_T}} by the expression of `v`.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{OUT_T}}>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let v = {{C}}(x[i]);
    out[i] = {{OUT_T}}({{EXPR}});
}
