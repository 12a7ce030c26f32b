// Several tensors converted between f32 and f16 in one dispatch: autocast's float16 copies of a
// model's float32 weights (anygpu/ops/foreach.py cast). Tensor k has P.tensors[k] =
// (n, first workgroup, 0, 0); its workgroups follow those of tensor k - 1, one element per
// thread. The ARRAYS placeholder declares the sources src0.. and the results out0.. with
// src_load / out_store, whose conversions are the cast kernel's (f16(v) rounds to nearest
// even and overflows to inf; f16 -> f32 is exact).
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
    let i = e.y;
    out_store(k, i, src_load(k, i));
}
