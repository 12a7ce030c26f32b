{{ENABLE}}
// C[z] = A[z] (m x k) @ B[z] (k x n), any strides (so transposed operands need no copy).
// A 64x64 output tile per workgroup of 16x16 threads, 4x4 outputs per thread held in
// vec4 accumulators (not arrays: arrays spill to local memory on some drivers).
// Elements are stored as {{T}} and multiplied and summed in {{C}} (f16 accumulates in f32).
//! include lib/matmul_params.wgsl
@group(0) @binding(1) var<storage, read> A: array<{{T}}>;
@group(0) @binding(2) var<storage, read> B: array<{{T}}>;
@group(0) @binding({{C_BINDING}}) var<storage, read_write> C: array<{{T}}>;
{{EPILOGUE}}

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;
var<workgroup> As: array<{{C}}, 1024>;  // [kk * TM + i]
var<workgroup> Bs: array<{{C}}, 1024>;  // [kk * TN + j]

@compute @workgroup_size(16, 16)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;
    let a_base = wid.z * P.a_bs;
    let b_base = wid.z * P.b_bs;
    let tid = lid.y * 16u + lid.x;
    var acc0 = vec4<{{C}}>({{C}}(0));
    var acc1 = vec4<{{C}}>({{C}}(0));
    var acc2 = vec4<{{C}}>({{C}}(0));
    var acc3 = vec4<{{C}}>({{C}}(0));
    for (var k0 = 0u; k0 < P.k; k0 = k0 + TK) {
        for (var l = 0u; l < 4u; l = l + 1u) {
            let e = tid + l * 256u;
            let i = e / TK;
            let kk = e % TK;
            let gi = row0 + i;
            let gk = k0 + kk;
            var av = {{C}}(0);
            if (gi < P.m && gk < P.k) { av = {{C}}(A[a_base + gi * P.a_rs + gk * P.a_cs]); }
            As[kk * TM + i] = av;
            let kb = e / TN;
            let j = e % TN;
            let gj = col0 + j;
            let gkb = k0 + kb;
            var bv = {{C}}(0);
            if (gj < P.n && gkb < P.k) { bv = {{C}}(B[b_base + gkb * P.b_rs + gj * P.b_cs]); }
            Bs[kb * TN + j] = bv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let ai = kk * TM + lid.y * 4u;
            let bj = kk * TN + lid.x * 4u;
            let a = vec4<{{C}}>(As[ai], As[ai + 1u], As[ai + 2u], As[ai + 3u]);
            let b = vec4<{{C}}>(Bs[bj], Bs[bj + 1u], Bs[bj + 2u], Bs[bj + 3u]);
            acc0 = acc0 + a.x * b;
            acc1 = acc1 + a.y * b;
            acc2 = acc2 + a.z * b;
            acc3 = acc3 + a.w * b;
        }
        workgroupBarrier();
    }
    let alpha = {{ALPHA}};
    let c_base = wid.z * P.c_bs;
    let r = row0 + lid.y * 4u;
    let c = col0 + lid.x * 4u;
    store_row(c_base, r, c, acc0 * alpha);
    store_row(c_base, r + 1u, c, acc1 * alpha);
    store_row(c_base, r + 2u, c, acc2 * alpha);
    store_row(c_base, r + 3u, c, acc3 * alpha);
}

fn store_row(base: u32, r: u32, c: u32, v: vec4<{{C}}>) {
    if (r >= P.m) { return; }
    let o = base + r * P.n;
{{STORE_ROW}}
}
