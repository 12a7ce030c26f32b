// Several tensors converted between f32 and f16 in one dispatch: autocast's float16 copies of a
// model's float32 weights (anygpu/ops/foreach.py cast_many), four elements a thread. Tensor k has
// P.tensors[k] = (units of four elements, first workgroup, n, 0); its workgroups follow those of
// tensor k - 1. The ARRAYS placeholder declares the sources src0.. with src_load (f16 widens
// exactly) and the results out0.. with out_unit(k, unit, n, v), which stores the unit's elements
// below n: f32 one by one; f16 as the cast kernel's f16(v) (round to nearest even, overflow to
// inf), two halves a 4-byte store (results bound as vec2<f16>: 16-bit stores one by one were the
// cost on the H200), the last word of an odd n carrying a zero half in the Buffer's padding.
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
    out_unit(k, e.y, n, v);
}
