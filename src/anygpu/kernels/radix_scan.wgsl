// ops/radix.py's exclusive scan of u32 words, first level: each block of 1024 elements (4 a
// thread, in a row) scanned in workgroup memory (y[i] = the sum of the block's elements
// before i) and the block's total written to sums[block], which the caller scans in turn and
// adds back (radix_scan_add.wgsl).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;
@group(0) @binding(3) var<storage, read_write> sums: array<u32>;

const WG: u32 = 256u;
const PER_THREAD: u32 = 4u;
var<workgroup> partial: array<u32, 512>;  // two halves: each step reads one and writes the other

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let block = wid.x + wid.y * nwg.x;
    let first = (block * WG + tid) * PER_THREAD;
    var values = vec4<u32>(0u);
    if (block < P.n_blocks) {
        for (var k = 0u; k < PER_THREAD; k = k + 1u) {
            if (first + k < P.n) { values[k] = x[first + k]; }
        }
    }
    let own = values.x + values.y + values.z + values.w;
    partial[tid] = own;
    workgroupBarrier();
    var read_half = 0u;
    for (var width = 1u; width < WG; width = width * 2u) {
        var sum = partial[read_half + tid];
        if (tid >= width) { sum = sum + partial[read_half + tid - width]; }
        let write_half = WG - read_half;
        partial[write_half + tid] = sum;
        workgroupBarrier();
        read_half = write_half;
    }
    let inclusive = partial[read_half + tid];
    if (block < P.n_blocks) {
        var running = inclusive - own;
        for (var k = 0u; k < PER_THREAD; k = k + 1u) {
            if (first + k < P.n) { y[first + k] = running; }
            running = running + values[k];
        }
        if (tid == WG - 1u) { sums[block] = inclusive; }
    }
}
