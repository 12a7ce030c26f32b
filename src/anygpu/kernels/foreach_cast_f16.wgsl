// foreach_cast.wgsl's f32 -> f16 direction, four elements a thread: tensor k has P.tensors[k] =
// (units of four elements, first workgroup, n, 0); its workgroups follow those of tensor k - 1.
// Each f16 is the cast kernel's f16(v) (round to nearest even, overflow to inf), stored two
// to a 32-bit word (the results are bound as arrays of vec2<f16>: one 4-byte store for two
// halves); the last word of an odd n carries a zero half in the Buffer's padding. ARRAYS
// declares src0.. (f32) and out0.. (vec2<f16>) with src_load and out_pair.
enable f16;
//! include lib/multi_tensor.wgsl
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
{{ARRAYS}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = element_of(tid, wid, nwg);
    if (e.z == 0u) { return; }
    let k = e.x;
    let i = 4u * e.y;
    let n = P.tensors[k].z;
    var v = vec4<f32>(src_load(k, i), 0.0, 0.0, 0.0);
    if (i + 1u < n) { v.y = src_load(k, i + 1u); }
    if (i + 2u < n) { v.z = src_load(k, i + 2u); }
    if (i + 3u < n) { v.w = src_load(k, i + 3u); }
    out_pair(k, 2u * e.y, vec2<f16>(f16(v.x), f16(v.y)));
    if (i + 2u < n) { out_pair(k, 2u * e.y + 1u, vec2<f16>(f16(v.z), f16(v.w))); }
}
