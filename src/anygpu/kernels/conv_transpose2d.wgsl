// conv_transpose2d (NCHW, weight [in_c, out_c/groups, kh, kw]) as an implicit GEMM over
// one output phase: the output rows oh = phase_h + stride_h*th and columns
// ow = phase_w + stride_w*tw. Within a phase only the kernel taps r with
// r*dil_h = phase_h + pad_h (mod stride_h) reach an input row, and they form the
// progression tap_r0 + rr*tap_r_step (rr < taps_r); likewise for s. The input row is
// then ih = th + (phase_h + pad_h - r*dil_h)/stride_h, an exact division done once per
// tap, so no product is wasted on the zeros a strided scatter would insert and the
// inner loop divides nothing. One GEMM per group g:
//   out[n, g*m + i, oh, ow] = bias + sum_k weight[g*cg + ic, i, r, s] * input[n, g*cg + ic, ih, iw]
// with m = out_c/groups, cg = in_c/groups, k = (ic, rr, ss).
struct Params {
    batch: u32, in_c: u32, in_h: u32, in_w: u32,
    out_c: u32, out_h: u32, out_w: u32, groups: u32,
    kh: u32, kw: u32, stride_h: u32, stride_w: u32,
    pad_h: u32, pad_w: u32, dil_h: u32, dil_w: u32,
    has_bias: u32, tiles_n: u32, tiles_m: u32,
    phase_h: u32, phase_w: u32, phase_rows: u32, phase_cols: u32,
    tap_r0: u32, tap_r_step: u32, taps_r: u32,
    tap_s0: u32, tap_s_step: u32, taps_s: u32,
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
const OUT_OF_RANGE: i32 = -1073741824;

var<workgroup> a_tile: array<f32, TK * TM>;  // [kk * TM + i]
var<workgroup> b_tile: array<f32, TK * TN>;  // [kk * TN + j]
var<workgroup> k_offset: array<i32, TK>;     // ic*in_h*in_w + dh*in_w + dw
var<workgroup> k_row: array<i32, TK>;        // dh = input row of th = 0 (OUT_OF_RANGE past k_total)
var<workgroup> k_col: array<i32, TK>;        // dw
var<workgroup> k_weight: array<u32, TK>;     // weight index of (g*cg + ic, 0, r, s)

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
    let phase_taps = P.taps_r * P.taps_s;
    let k_total = group_in_c * phase_taps;
    let in_hw = P.in_h * P.in_w;
    let phase_hw = P.phase_rows * P.phase_cols;
    let n_total = P.batch * phase_hw;
    let col0 = (tile % P.tiles_n) * TN;
    let row0 = ((tile / P.tiles_n) % P.tiles_m) * TM;
    let g = tile / (P.tiles_n * P.tiles_m);

    let b_j = tid % TN;
    let col = col0 + b_j;
    let col_ok = col < n_total;
    let col_n = col / phase_hw;
    let th = i32((col % phase_hw) / P.phase_cols);
    let tw = i32((col % phase_hw) % P.phase_cols);
    let col_base = i32((col_n * P.in_c + g * group_in_c) * in_hw) + th * i32(P.in_w) + tw;
    let a_kk = tid % TK;

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k_total; k0 = k0 + TK) {
        if (tid < TK) {
            let k = k0 + tid;
            let ic = k / phase_taps;
            let tap = k % phase_taps;
            let r = P.tap_r0 + (tap / P.taps_s) * P.tap_r_step;
            let s = P.tap_s0 + (tap % P.taps_s) * P.tap_s_step;
            let dh = (i32(P.phase_h + P.pad_h) - i32(r * P.dil_h)) / i32(P.stride_h);
            let dw = (i32(P.phase_w + P.pad_w) - i32(s * P.dil_w)) / i32(P.stride_w);
            k_row[tid] = select(OUT_OF_RANGE, dh, k < k_total);
            k_col[tid] = dw;
            k_offset[tid] = i32(ic * in_hw) + dh * i32(P.in_w) + dw;
            k_weight[tid] = (g * group_in_c + ic) * m * taps + r * P.kw + s;
        }
        workgroupBarrier();
        for (var l = 0u; l < TK * TM / THREADS; l = l + 1u) {
            let i = tid / TK + l * (THREADS / TK);
            let row = row0 + i;
            var w = 0.0;
            if (row < m && k0 + a_kk < k_total) { w = weight[k_weight[a_kk] + row * taps]; }
            a_tile[a_kk * TM + i] = w;
        }
        for (var l = 0u; l < TK * TN / THREADS; l = l + 1u) {
            let kk = tid / TN + l * (THREADS / TN);
            let ih = th + k_row[kk];
            let iw = tw + k_col[kk];
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
    store_row(g * m, m, row, c, n_total, acc0);
    store_row(g * m, m, row + 1u, c, n_total, acc1);
    store_row(g * m, m, row + 2u, c, n_total, acc2);
    store_row(g * m, m, row + 3u, c, n_total, acc3);
}

fn store_row(channel0: u32, m: u32, row: u32, col: u32, n_total: u32, v: vec4<f32>) {
    if (row >= m) { return; }
    let oc = channel0 + row;
    var b = 0.0;
    if (P.has_bias != 0u) { b = bias[oc]; }
    let phase_hw = P.phase_rows * P.phase_cols;
    for (var t = 0u; t < 4u; t = t + 1u) {
        let j = col + t;
        if (j < n_total) {
            let n = j / phase_hw;
            let oh = P.phase_h + ((j % phase_hw) / P.phase_cols) * P.stride_h;
            let ow = P.phase_w + ((j % phase_hw) % P.phase_cols) * P.stride_w;
            out[((n * P.out_c + oc) * P.out_h + oh) * P.out_w + ow] = v[t] + b;
        }
    }
}
