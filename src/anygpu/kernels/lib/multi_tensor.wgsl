// Multi-tensor kernels (anygpu/ops/foreach.py's layout): tensor k has P.tensors[k] = (n, first
// workgroup, ...), its workgroups following those of tensor k - 1, one element per thread
// (256-thread workgroups, counted over x then y).
// The tensor whose workgroups include workgroup w.
fn tensor_of(w: u32) -> u32 {
    var k = 0u;
    for (var j = 1u; j < P.count; j = j + 1u) {
        if (P.tensors[j].y <= w) { k = j; }
    }
    return k;
}

// This thread's tensor k and element i as (k, i, 1), or (.., .., 0) where it has none (past the
// last workgroup, or past its tensor's end).
fn element_of(tid: u32, wid: vec3<u32>, nwg: vec3<u32>) -> vec3<u32> {
    let w = wid.x + wid.y * nwg.x;
    if (w >= P.total_workgroups) { return vec3<u32>(0u); }
    let k = tensor_of(w);
    let i = (w - P.tensors[k].y) * 256u + tid;
    return vec3<u32>(k, i, select(0u, 1u, i < P.tensors[k].x));
}
