// Gradient of conv2d's weight as an implicit GEMM, one per group g:
//   grad_weight[g*m + i, j] = sum_k grad_out[n, g*m + i, p] * patch[(n, p), j]
// m = out_c/groups rows, columns j = (ic, r, s) over in_c/groups * kh * kw, and the
// reduction k = (n, p) runs over batch * out_h * out_w. That reduction is long and the
// output small, so it is split into `splits` ranges of k_per_split: each workgroup
// writes a partial sum to partial[split, oc, j] and the caller sums over splits.
// Each K tile decodes its TK (n, p) values once into workgroup tables; each thread
// decodes its one B column (ic, r, s) once, so the inner loads divide nothing.
struct Params {
    batch: u32, in_c: u32, in_h: u32, in_w: u32,
    out_c: u32, out_h: u32, out_w: u32, groups: u32,
    kh: u32, kw: u32, stride_h: u32, stride_w: u32,
    pad_h: u32, pad_w: u32, dil_h: u32, dil_w: u32,
    tiles_n: u32, tiles_m: u32, splits: u32, k_per_split: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> input: array<f32>;
@group(0) @binding(2) var<storage, read> grad_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> partial: array<f32>;

const TM: u32 = {{TM}}u;
const TN: u32 = 64u;
const TK: u32 = 16u;
const THREADS: u32 = (TN / 4u) * (TM / 4u);
const OUT_OF_RANGE: i32 = -1073741824;

var<workgroup> a_tile: array<f32, TK * TM>;  // [kk * TM + i]
var<workgroup> b_tile: array<f32, TK * TN>;  // [kk * TN + j]
var<workgroup> k_input: array<i32, TK>;      // input index of (n, g*cg, ih0, iw0)
var<workgroup> k_row: array<i32, TK>;        // ih0 = oh*stride_h - pad_h (OUT_OF_RANGE past the split)
var<workgroup> k_col: array<i32, TK>;        // iw0
var<workgroup> k_grad: array<u32, TK>;       // grad_out index of (n, 0, oh, ow)

@compute @workgroup_size(16, TM / 4u)
fn main(@builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= P.tiles_n * P.tiles_m * P.groups * P.splits) { return; }
    let m = P.out_c / P.groups;
    let group_in_c = P.in_c / P.groups;
    let taps = P.kh * P.kw;
    let n_total = group_in_c * taps;
    let in_hw = P.in_h * P.in_w;
    let out_hw = P.out_h * P.out_w;
    let col0 = (tile % P.tiles_n) * TN;
    let row0 = ((tile / P.tiles_n) % P.tiles_m) * TM;
    let g = (tile / (P.tiles_n * P.tiles_m)) % P.groups;
    let split = tile / (P.tiles_n * P.tiles_m * P.groups);
    let k_begin = split * P.k_per_split;
    let k_end = min(k_begin + P.k_per_split, P.batch * out_hw);

    // The weight column (ic, r, s) this thread loads in every K tile.
    let b_j = tid % TN;
    let col = col0 + b_j;
    let col_ok = col < n_total;
    let tap = col % taps;
    let dr = i32((tap / P.kw) * P.dil_h);
    let ds = i32((tap % P.kw) * P.dil_w);
    let col_offset = i32((col / taps) * in_hw) + dr * i32(P.in_w) + ds;
    let a_kk = tid % TK;

    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var k0 = k_begin; k0 < k_end; k0 = k0 + TK) {
        if (tid < TK) {
            let k = k0 + tid;
            let n = k / out_hw;
            let p = k % out_hw;
            let ih0 = i32((p / P.out_w) * P.stride_h) - i32(P.pad_h);
            let iw0 = i32((p % P.out_w) * P.stride_w) - i32(P.pad_w);
            k_row[tid] = select(OUT_OF_RANGE, ih0, k < k_end);
            k_col[tid] = iw0;
            k_input[tid] = i32((n * P.in_c + g * group_in_c) * in_hw) + ih0 * i32(P.in_w) + iw0;
            k_grad[tid] = n * P.out_c * out_hw + p;
        }
        workgroupBarrier();
        for (var l = 0u; l < TK * TM / THREADS; l = l + 1u) {
            let i = tid / TK + l * (THREADS / TK);
            let row = row0 + i;
            var v = 0.0;
            if (row < m && k0 + a_kk < k_end) { v = grad_out[k_grad[a_kk] + (g * m + row) * out_hw]; }
            a_tile[a_kk * TM + i] = v;
        }
        for (var l = 0u; l < TK * TN / THREADS; l = l + 1u) {
            let kk = tid / TN + l * (THREADS / TN);
            let ih = k_row[kk] + dr;
            let iw = k_col[kk] + ds;
            var v = 0.0;
            if (col_ok && u32(ih) < P.in_h && u32(iw) < P.in_w) {
                v = input[u32(k_input[kk] + col_offset)];
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
    let base = split * P.out_c * n_total + g * m * n_total;
    let row = row0 + lid.y * 4u;
    let c = col0 + lid.x * 4u;
    store_row(base, m, row, c, n_total, acc0);
    store_row(base, m, row + 1u, c, n_total, acc1);
    store_row(base, m, row + 2u, c, n_total, acc2);
    store_row(base, m, row + 3u, c, n_total, acc3);
}

fn store_row(base: u32, m: u32, row: u32, col: u32, n_total: u32, v: vec4<f32>) {
    if (row >= m) { return; }
    for (var t = 0u; t < 4u; t = t + 1u) {
        if (col + t < n_total) { partial[base + row * n_total + col + t] = v[t]; }
    }
}
