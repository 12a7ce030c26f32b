// The entry point `main` of a kernel that gives each of P.n elements one thread (the grid of
// ops/_common.py's grid_1d). The including kernel declares its uniforms as P with a field
// `n: u32` and `fn element(i: u32)`, which computes element i < P.n.
//! include lib/grid_1d.wgsl

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n) { return; }
    element(i);
}
