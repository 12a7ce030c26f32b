// gamma and beta of an f16 layer norm ([cols] each, cols % 8 == 0) interleaved for the
// register kernels' "w8p" form (ops/row_gen.py): per unit of 8 columns its 8 gammas then
// its 8 betas, as u32 words (pairs[2i] = gamma words of unit i, pairs[2i + 1] = beta's),
// so a unit reads one 32-byte block instead of 16 bytes from each of two buffers.
// One thread per unit; plain bit copies.
struct Params { n: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> gamma: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> beta: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> pairs: array<vec4<u32>>;
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    pairs[2u * i] = gamma[i];
    pairs[2u * i + 1u] = beta[i];
}
