//! include lib/binary_io.wgsl
// out[i] = f(a[ia], b[ib]) with NumPy broadcasting: up to 8 dims, right-aligned,
// a broadcast dim has stride 0. Expression of `a`, `b`, `alpha` in {{C}}.

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    var rest = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = 7i; d >= 8i - i32(P.ndim); d = d - 1i) {
        let size = P.shape[d / 4][d % 4];
        let coord = rest % size;
        rest = rest / size;
        ia = ia + coord * P.a_strides[d / 4][d % 4];
        ib = ib + coord * P.b_strides[d / 4][d % 4];
    }
    store_binary(i, ia, ib);
}
