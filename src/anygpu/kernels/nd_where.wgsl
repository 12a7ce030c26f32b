{{ENABLE}}
// out[i] = cond[i] != 0 ? a[i] : b[i] (equal lengths; broadcasting is done by the caller).
// cond is stored as {{T}}; a, b and out as {{OUT_T}} (raw words for every 4-byte dtype).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> cond: array<{{T}}>;
@group(0) @binding(2) var<storage, read> in_a: array<{{OUT_T}}>;
@group(0) @binding(3) var<storage, read> in_b: array<{{OUT_T}}>;
@group(0) @binding(4) var<storage, read_write> out: array<{{OUT_T}}>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    out[i] = select(in_b[i], in_a[i], {{C}}(cond[i]) != {{C}}(0));
}
