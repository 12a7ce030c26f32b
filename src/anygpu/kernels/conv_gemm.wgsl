// The implicit GEMM shared by conv2d, conv_transpose2d and conv2d_grad_weight:
//   out[g, row, col] = bias + sum_k A[g, row, k] * B[g, k, col]
// for each group g, where A is read from a tensor (fetch_a) and B is gathered from an
// image (b_source) through two decodings, never stored as a matrix (no im2col):
//   column(g, col) -> Column: what the column contributes to every gather, decoded
//     once per workgroup into the col_* tables
//   decode_k(g, k, kk, k_end): what k contributes, written to the k_* tables per k step
// so that B[k, col] = b_source[col_offset + k_offset] wherever the image row
// col_row + k_row and column col_col + k_col fall inside the image. The inner loops
// thus divide nothing (integer division is slow on CPU adapters).
// The kind of convolution (its Params, bindings and those functions) fills the KIND
// placeholder; ops/conv_gen.py fills the unrolled parts from the tile parameters.
//
// A TILE_M x TILE_N block per workgroup, TILE_K deep steps staged in workgroup memory
// k-major as vec4 (a_tile[kk][i/4], b_tile[kk][j/4]). Each thread holds ROWS x 8
// outputs in named vec4 accumulators and the kk loop of multiply-adds is written out
// in full: loops over function-scope arrays spill to memory on several drivers.
// Thread (tx, ty) owns row groups ty, ty + THREADS_Y, ... and column groups tx,
// tx + THREADS_X, ... (4 rows or columns each). Long reductions may be split: the
// workgroups of split s cover k in [s*k_per_split, (s+1)*k_per_split).

const TILE_M: u32 = {{TILE_M}}u;
const TILE_N: u32 = {{TILE_N}}u;
const TILE_K: u32 = {{TILE_K}}u;
const THREADS: u32 = {{THREADS_X}}u * {{THREADS_Y}}u;
// An image row that no column offset brings back inside: marks k past the end.
const OUT_OF_RANGE: i32 = -1073741824;

struct Column {
    offset: i32,  // b_source index of the column's origin (add k_offset)
    row: i32,     // image row of the origin (add k_row)
    col: i32,     // image column of the origin (add k_col)
    valid: bool,  // col < gemm_n()
}

var<workgroup> a_tile: array<vec4<f32>, TILE_K * TILE_M / 4u>;
var<workgroup> b_tile: array<vec4<f32>, TILE_K * TILE_N / 4u>;
var<workgroup> k_offset: array<i32, TILE_K>;
var<workgroup> k_row: array<i32, TILE_K>;
var<workgroup> k_col: array<i32, TILE_K>;
// The tile's columns, decoded once per workgroup (row OUT_OF_RANGE past gemm_n()).
var<workgroup> col_offset: array<i32, TILE_N>;
var<workgroup> col_row: array<i32, TILE_N>;
var<workgroup> col_col: array<i32, TILE_N>;

{{KIND}}

fn fetch_b(j: u32, kk: u32) -> f32 {
    let ih = col_row[j] + k_row[kk];
    let iw = col_col[j] + k_col[kk];
    if (u32(ih) < P.in_h && u32(iw) < P.in_w) {
        return b_source[u32(col_offset[j] + k_offset[kk])];
    }
    return 0.0;
}

@compute @workgroup_size({{THREADS_X}}, {{THREADS_Y}})
fn main(@builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= P.tiles_n * P.tiles_m * P.groups * P.splits) { return; }
    let tx = lid.x;
    let ty = lid.y;
    let m = gemm_m();
    let n = gemm_n();
    let col0 = (tile % P.tiles_n) * TILE_N;
    let row0 = ((tile / P.tiles_n) % P.tiles_m) * TILE_M;
    let g = (tile / (P.tiles_n * P.tiles_m)) % P.groups;
    let split = tile / (P.tiles_n * P.tiles_m * P.groups);
    let k_begin = split * P.k_per_split;
    let k_end = min(k_begin + P.k_per_split, gemm_k());

    for (var j = tid; j < TILE_N; j = j + THREADS) {
        let c = column(g, col0 + j);
        col_offset[j] = c.offset;
        col_row[j] = select(OUT_OF_RANGE, c.row, c.valid);
        col_col[j] = c.col;
    }
{{DECLARE}}
    for (var k0 = k_begin; k0 < k_end; k0 = k0 + TILE_K) {
        for (var kk = tid; kk < TILE_K; kk = kk + THREADS) { decode_k(g, k0 + kk, kk, k_end); }
        workgroupBarrier();
        for (var e = tid; e < TILE_K * TILE_M; e = e + THREADS) {
            let kk = e % TILE_K;
            let i = e / TILE_K;
            var value = 0.0;
            if (row0 + i < m && k0 + kk < k_end) { value = fetch_a(g, row0 + i, k0 + kk, kk); }
            a_tile[kk * (TILE_M / 4u) + (i >> 2u)][i & 3u] = value;
        }
        for (var e = tid; e < TILE_K * TILE_N; e = e + THREADS) {
            let kk = e / TILE_N;
            let j = e % TILE_N;
            b_tile[kk * (TILE_N / 4u) + (j >> 2u)][j & 3u] = fetch_b(j, kk);
        }
        workgroupBarrier();
{{COMPUTE}}
        workgroupBarrier();
    }
    let stride = output_row_stride();
{{STORE}}
}
