// The uniform block of the matmul kernels (matmul_tiled.wgsl and matmul_family.wgsl), packed
// by anygpu/ops/matmul_gen.py as PARAM_FORMAT: C[z] (m x n) from A[z] (m x k) and B[z] (k x n)
// for z < batch; element (i, j) of A at z * a_bs + i * a_rs + j * a_cs (B likewise, C at
// z * c_bs, rows n apart); alpha_bits: the f32 bits of alpha, the factor of the product;
// kernels with an epilogue (ops/matmul_gen.Epilogue) add a zero word, padding and its scalars.
struct Params {
    m: u32, n: u32, k: u32, batch: u32,
    a_rs: u32, a_cs: u32, b_rs: u32, b_cs: u32,
    a_bs: u32, b_bs: u32, c_bs: u32, alpha_bits: u32,{{EPILOGUE_PARAMS}}
}
@group(0) @binding(0) var<uniform> P: Params;
