// One pass of ops/radix.py's LSD radix sort, first half: the digit (bits shift.. of each key,
// P.digits of them) of the 256 keys of each block, counted per block into hist
// [digits, n_blocks] (digit-major, so an exclusive scan of hist gives every (digit, block)
// its first place in the pass's output), and each key's rank among the keys of its block
// with the same digit that come before it (what makes the sort stable). The rank counts
// equal bytes in the block's digits packed four to a word (a quarter of the loads of a
// digit-by-digit loop, which dominated the pass on lavapipe).
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> keys: array<u32>;
@group(0) @binding(2) var<storage, read_write> hist: array<u32>;
@group(0) @binding(3) var<storage, read_write> rank: array<u32>;

const WG: u32 = 256u;
var<workgroup> block_digits: array<u32, WG>;
var<workgroup> packed: array<u32, 64>;  // digit of key 4w + b in byte b of word w
var<workgroup> counts: array<atomic<u32>, WG>;

// How many of x's four bytes are zero.
fn zero_bytes(x: u32) -> u32 {
    let low_set = (x & 0x7f7f7f7fu) + 0x7f7f7f7fu;  // bit 7 of a byte: its low 7 bits are not all 0
    return countOneBits(~(low_set | x | 0x7f7f7f7fu));
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let block = wid.x + wid.y * nwg.x;
    let i = block * WG + tid;
    let valid = block < P.n_blocks && i < P.n;  // the invalid are the last block's tail: after every valid key
    var digit = 0u;
    if (valid) { digit = (keys[i] >> P.shift) & (P.digits - 1u); }
    block_digits[tid] = digit;
    atomicStore(&counts[tid], 0u);
    workgroupBarrier();
    if (tid < 64u) {
        let at = tid * 4u;
        packed[tid] = block_digits[at] | (block_digits[at + 1u] << 8u) | (block_digits[at + 2u] << 16u)
            | (block_digits[at + 3u] << 24u);
    }
    workgroupBarrier();
    if (valid) {
        let pattern = digit * 0x01010101u;  // equal bytes xor to zero
        let whole = tid / 4u;
        var before = 0u;
        for (var w = 0u; w < whole; w = w + 1u) {
            before = before + zero_bytes(packed[w] ^ pattern);
        }
        let part = tid % 4u;  // the keys before tid in its own word: its low `part` bytes
        if (part > 0u) {
            before = before + zero_bytes((packed[whole] ^ pattern) | ~((1u << (8u * part)) - 1u));
        }
        rank[i] = before;
        atomicAdd(&counts[digit], 1u);  // integer counts: the same whatever the order
    }
    workgroupBarrier();
    if (block < P.n_blocks && tid < P.digits) {
        hist[tid * P.n_blocks + block] = atomicLoad(&counts[tid]);
    }
}
