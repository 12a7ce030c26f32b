// The element a thread handles in the 1-d grid of 256-thread workgroups that
// anygpu/ops/_common.py's grid_1d launches (workgroups past the first dimension's limit
// folded into y).
fn element_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}
