// Several tensors multiplied in place by one factor read from the GPU (factor[0]): the
// scaling of clip_grad_norm_ (anygpu/ops/foreach.py). Tensor k has P.tensors[k] =
// (units of four elements, first workgroup, n, 0); its workgroups follow those of tensor k - 1,
// four elements a thread (one a thread moved ~0.7 TB/s on the H200 in nanoGPT's step).
// The ARRAYS placeholder declares the tensors t0.. (bindings 2..) with t_load / t_store.
//! include lib/multi_tensor.wgsl
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> factor: array<f32>;
{{ARRAYS}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = element_of(tid, wid, nwg);
    if (e.z == 0u) { return; }
    let k = e.x;
    let n = P.tensors[k].z;
    let f = factor[0];
    for (var i = 4u * e.y; i < min(4u * e.y + 4u, n); i++) {
        t_store(k, i, t_load(k, i) * f);
    }
}
