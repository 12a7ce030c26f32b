// The entry point `main` of a kernel that gives each row one workgroup (rows past the first
// dispatch dimension's limit folded into y). The including kernel declares `const WG: u32`
// (its workgroup size, a power of two), `fn row_count() -> u32` (from the uniforms), and
// `fn row_body(r: u32, t: u32)`: row r as thread t of WG. row_body is called in uniform
// control flow, so it may use the workgroup reductions included here.
//! include lib/workgroup_reduce.wgsl

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wid.x + wid.y * nwg.x;
    if (r >= row_count()) { return; }  // uniform per workgroup: safe before the barriers
    row_body(r, tid);
}
