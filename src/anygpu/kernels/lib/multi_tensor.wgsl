// Multi-tensor kernels (anygpu/ops/foreach.py's layout): tensor k has P.tensors[k] = (n, first
// workgroup, ...), its workgroups following those of tensor k - 1, one element per thread.
// The tensor whose workgroups include workgroup w.
fn tensor_of(w: u32) -> u32 {
    var k = 0u;
    for (var j = 1u; j < P.count; j = j + 1u) {
        if (P.tensors[j].y <= w) { k = j; }
    }
    return k;
}
