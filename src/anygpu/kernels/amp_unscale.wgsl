// GradScaler.unscale_ (anygpu/ops/scaler.py unscale_check; torch's
// _amp_foreach_non_finite_check_and_unscale_): several f32 gradients multiplied in place by the
// inverse scale in one dispatch, and one flag set where a result is inf or NaN (a bit test of
// the exponent, not a comparison: no driver's NaN rules are involved). Gradient k has
// P.tensors[k] = (units of four elements, first workgroup, n, 0); its workgroups follow those of
// gradient k - 1, four elements a thread (one a thread took 52 us a dispatch of ~1.8 M elements on
// the H200). The ARRAYS placeholder declares g0.. with g_load / g_store. INVERSE is
// P.inverse (from the host) or reciprocal(scale[0]) (the scale on the GPU, its reciprocal
// correctly rounded as torch's scale.double().reciprocal().float()).
//! include lib/exact_f32.wgsl
//! include lib/multi_tensor.wgsl
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
{{ARRAYS}}
@group(0) @binding({{FLAG_BINDING}}) var<storage, read_write> flag: array<atomic<u32>>;
{{SCALE}}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = element_of(tid, wid, nwg);
    if (e.z == 0u) { return; }
    let k = e.x;
    let n = P.tensors[k].z;
    let inverse = {{INVERSE}};
    var found = false;
    for (var i = 4u * e.y; i < min(4u * e.y + 4u, n); i++) {
        let v = g_load(k, i) * inverse;
        g_store(k, i, v);
        found = found || (bitcast<u32>(v) & 0x7f800000u) == 0x7f800000u;
    }
    if (found) { atomicOr(&flag[0], 1u); }
}
