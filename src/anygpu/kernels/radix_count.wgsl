// One pass of ops/radix.py's LSD radix sort, first half: the digit (bits shift.. of each key,
// P.digits of them) of the 256 keys of each block, counted per block into hist
// [digits, n_blocks] (digit-major, so an exclusive scan of hist gives every (digit, block)
// its first place in the pass's output), and each key's rank among the keys of its block
// with the same digit that come before it (what makes the sort stable).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> keys: array<u32>;
@group(0) @binding(2) var<storage, read_write> hist: array<u32>;
@group(0) @binding(3) var<storage, read_write> rank: array<u32>;

const WG: u32 = 256u;
const NO_DIGIT: u32 = 0xffffffffu;  // the last block's places past n
var<workgroup> block_digits: array<u32, WG>;
var<workgroup> counts: array<atomic<u32>, WG>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let block = wid.x + wid.y * nwg.x;
    let i = block * WG + tid;
    var digit = NO_DIGIT;
    if (block < P.n_blocks && i < P.n) { digit = (keys[i] >> P.shift) & (P.digits - 1u); }
    block_digits[tid] = digit;
    atomicStore(&counts[tid], 0u);
    workgroupBarrier();
    if (digit != NO_DIGIT) {
        var before = 0u;
        for (var k = 0u; k < tid; k = k + 1u) {
            before = before + select(0u, 1u, block_digits[k] == digit);
        }
        rank[i] = before;
        atomicAdd(&counts[digit], 1u);  // integer counts: the same whatever the order
    }
    workgroupBarrier();
    if (block < P.n_blocks && tid < P.digits) {
        hist[tid * P.n_blocks + block] = atomicLoad(&counts[tid]);
    }
}
