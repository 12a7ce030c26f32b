//! include lib/binary_io.wgsl
// out[i] = f(a[i], b[i]) for a scalar expression f of `a`, `b` (and `alpha`), computed
// in {{C}} on elements stored as {{T}}, written as {{OUT_T}}.

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    store_binary(i, i, i);
}
