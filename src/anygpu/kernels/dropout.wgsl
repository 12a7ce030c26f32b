// out[i] = x[i] * keep(i) / (1 - p), where keep(i) is a counter-based random draw from
// (seed, i): the same seed gives the same mask, so the backward re-derives it instead of
// storing it. keep(i) = hash >= threshold, threshold = p * 2^32.
struct Params { n: u32, seed_lo: u32, seed_hi: u32, threshold: u32, scale: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

// PCG output permutation (O'Neill), as a stateless hash.
fn pcg_hash(v: u32) -> u32 {
    let state = v * 747796405u + 2891336453u;
    let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
    return (word >> 22u) ^ word;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let h = pcg_hash(pcg_hash(i ^ P.seed_lo) + P.seed_hi);
    out[i] = select(0.0, x[i] * P.scale, h >= P.threshold);
}
