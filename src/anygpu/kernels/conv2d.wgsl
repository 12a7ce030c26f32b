// conv2d forward (NCHW) as an implicit GEMM, one GEMM per group g:
//   out[n, g*m + i, p] = bias[g*m + i] + sum_k weight[g*m + i, k] * patch[k, (n, p)]
// m = out_c/groups rows, k = (ic, r, s) over in_c/groups * kh * kw, columns (n, p) with
// p = oh*out_w + ow. The patch (im2col) matrix is never stored: each K tile decodes its
// TK k values once into workgroup tables and each thread decodes its one B column once,
// so the loads of the inner loop need no integer division (slow on CPU adapters).
// A TM x 64 output tile per workgroup, 4x4 outputs per thread in vec4 accumulators.
struct Params {
    batch: u32, in_c: u32, in_h: u32, in_w: u32,
    out_c: u32, out_h: u32, out_w: u32, groups: u32,
    kh: u32, kw: u32, stride_h: u32, stride_w: u32,
    pad_h: u32, pad_w: u32, dil_h: u32, dil_w: u32,
    has_bias: u32, tiles_n: u32, tiles_m: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;

const TM: u32 = {{TM}}u;
const TN: u32 = 64u;
const TK: u32 = 16u;
const THREADS: u32 = (TN / 4u) * (TM / 4u);
// Row offset that no padding can bring back in range: marks k past the end.
const OUT_OF_RANGE: i32 = -1073741824;

var<workgroup> a_tile: array<f32, TK * TM>;  // [kk * TM + i]
var<workgroup> b_tile: array<f32, TK * TN>;  // [kk * TN + j]
var<workgroup> k_offset: array<i32, TK>;     // ic*in_h*in_w + r*dil_h*in_w + s*dil_w
var<workgroup> k_row: array<i32, TK>;        // r*dil_h (OUT_OF_RANGE past k_total)
var<workgroup> k_col: array<i32, TK>;        // s*dil_w

@compute @workgroup_size(16, TM / 4u)
fn main(@builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= P.tiles_n * P.tiles_m * P.groups) { return; }
    let m = P.out_c / P.groups;
    let group_in_c = P.in_c / P.groups;
    let taps = P.kh * P.kw;
    let k_total = group_in_c * taps;
    let in_hw = P.in_h * P.in_w;
    let out_hw = P.out_h * P.out_w;
    let n_total = P.batch * out_hw;
    let col0 = (tile % P.tiles_n) * TN;
    let row0 = ((tile / P.tiles_n) % P.tiles_m) * TM;
    let g = tile / (P.tiles_n * P.tiles_m);

    // The B column this thread loads in every K tile (THREADS is a multiple of TN).
    let b_j = tid % TN;
    let col = col0 + b_j;
    let col_ok = col < n_total;
    let col_n = col / out_hw;
    let col_p = col % out_hw;
    let ih0 = i32((col_p / P.out_w) * P.stride_h) - i32(P.pad_h);
    let iw0 = i32((col_p % P.out_w) * P.stride_w) - i32(P.pad_w);
    let col_base = i32((col_n * P.in_c + g * group_in_c) * in_hw) + ih0 * i32(P.in_w) + iw0;
    // The A column (k within the tile) this thread loads (THREADS is a multiple of TK).
    let a_kk = tid % TK;

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k_total; k0 = k0 + TK) {
        if (tid < TK) {
            let k = k0 + tid;
            let ic = k / taps;
            let tap = k % taps;
            let dr = i32((tap / P.kw) * P.dil_h);
            let ds = i32((tap % P.kw) * P.dil_w);
            k_row[tid] = select(OUT_OF_RANGE, dr, k < k_total);
            k_col[tid] = ds;
            k_offset[tid] = i32(ic * in_hw) + dr * i32(P.in_w) + ds;
        }
        workgroupBarrier();
        for (var l = 0u; l < TK * TM / THREADS; l = l + 1u) {
            let i = tid / TK + l * (THREADS / TK);
            let row = row0 + i;
            let k = k0 + a_kk;
            var w = 0.0;
            if (row < m && k < k_total) { w = weight[(g * m + row) * k_total + k]; }
            a_tile[a_kk * TM + i] = w;
        }
        for (var l = 0u; l < TK * TN / THREADS; l = l + 1u) {
            let kk = tid / TN + l * (THREADS / TN);
            let ih = ih0 + k_row[kk];
            let iw = iw0 + k_col[kk];
            var v = 0.0;
            if (col_ok && u32(ih) < P.in_h && u32(iw) < P.in_w) {
                v = input[u32(col_base + k_offset[kk])];
            }
            b_tile[kk * TN + b_j] = v;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let ai = kk * TM + lid.y * 4u;
            let bj = kk * TN + lid.x * 4u;
            let a = vec4<f32>(a_tile[ai], a_tile[ai + 1u], a_tile[ai + 2u], a_tile[ai + 3u]);
            let b = vec4<f32>(b_tile[bj], b_tile[bj + 1u], b_tile[bj + 2u], b_tile[bj + 3u]);
            acc0 = acc0 + a.x * b;
            acc1 = acc1 + a.y * b;
            acc2 = acc2 + a.z * b;
            acc3 = acc3 + a.w * b;
        }
        workgroupBarrier();
    }
    let row = row0 + lid.y * 4u;
    let c = col0 + lid.x * 4u;
    store_row(g * m, m, row, c, n_total, out_hw, acc0);
    store_row(g * m, m, row + 1u, c, n_total, out_hw, acc1);
    store_row(g * m, m, row + 2u, c, n_total, out_hw, acc2);
    store_row(g * m, m, row + 3u, c, n_total, out_hw, acc3);
}

fn store_row(channel0: u32, m: u32, row: u32, col: u32, n_total: u32, out_hw: u32, v: vec4<f32>) {
    if (row >= m) { return; }
    let oc = channel0 + row;
    var b = 0.0;
    if (P.has_bias != 0u) { b = bias[oc]; }
    for (var t = 0u; t < 4u; t = t + 1u) {
        let j = col + t;
        if (j < n_total) {
            out[((j / out_hw) * P.out_c + oc) * out_hw + j % out_hw] = v[t] + b;
        }
    }
}
