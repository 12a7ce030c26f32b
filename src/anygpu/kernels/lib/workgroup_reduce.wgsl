// Workgroup tree reductions: every thread passes its value and gets the workgroup's total.
// The including kernel declares `const WG: u32` (a power of two: its workgroup size). All
// threads of the workgroup must call these in uniform control flow (they hold barriers);
// each returns after a barrier, so the scratch can be reused at once.
var<workgroup> wg_scratch: array<f32, WG>;
var<workgroup> wg_scratch4: array<vec4<f32>, WG>;

fn workgroup_sum(tid: u32, value: f32) -> f32 {
    wg_scratch[tid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (tid < width) { wg_scratch[tid] = wg_scratch[tid] + wg_scratch[tid + width]; }
        workgroupBarrier();
    }
    let total = wg_scratch[0];
    workgroupBarrier();  // everyone has read the total before the scratch is reused
    return total;
}

fn workgroup_max(tid: u32, value: f32) -> f32 {
    wg_scratch[tid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (tid < width) { wg_scratch[tid] = max(wg_scratch[tid], wg_scratch[tid + width]); }
        workgroupBarrier();
    }
    let total = wg_scratch[0];
    workgroupBarrier();
    return total;
}

// Up to four sums at once (one tree, the same order per component as workgroup_sum).
fn workgroup_sum4(tid: u32, value: vec4<f32>) -> vec4<f32> {
    wg_scratch4[tid] = value;
    workgroupBarrier();
    for (var width = WG / 2u; width > 0u; width = width / 2u) {
        if (tid < width) { wg_scratch4[tid] = wg_scratch4[tid] + wg_scratch4[tid + width]; }
        workgroupBarrier();
    }
    let total = wg_scratch4[0];
    workgroupBarrier();
    return total;
}
