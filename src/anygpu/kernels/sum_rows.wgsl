// Column sums of a [rows, cols] array: partial[chunk, c] = sum of a[r, c] over the rows
// r of the chunk (chunk_rows of them). A workgroup covers 64 columns of one chunk with
// 4 row lanes, so neighbouring threads read neighbouring columns; the caller sums the
// partials again when n_chunks > 1. Reads {{T}}, sums in f32, stores {{OUT_T}}.
{{ENABLE}}
struct Params { rows: u32, cols: u32, chunk_rows: u32, n_chunks: u32, col_tiles: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> a: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> partial: array<{{OUT_T}}>;

const COLS: u32 = 64u;
const LANES: u32 = 4u;
var<workgroup> lane_sums: array<f32, COLS * LANES>;

@compute @workgroup_size(64, 4)
fn main(@builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let tile = wid.x + wid.y * nwg.x;
    if (tile >= P.col_tiles * P.n_chunks) { return; }
    let col = (tile % P.col_tiles) * COLS + lid.x;
    let chunk = tile / P.col_tiles;
    let begin = chunk * P.chunk_rows;
    let end = min(begin + P.chunk_rows, P.rows);
    var acc = 0.0;
    if (col < P.cols) {
        for (var r = begin + lid.y; r < end; r = r + LANES) {
            acc = acc + f32(a[r * P.cols + col]);
        }
    }
    lane_sums[lid.y * COLS + lid.x] = acc;
    workgroupBarrier();
    if (lid.y == 0u && col < P.cols) {
        var total = 0.0;
        for (var lane = 0u; lane < LANES; lane = lane + 1u) {
            total = total + lane_sums[lane * COLS + lid.x];
        }
        partial[chunk * P.cols + col] = {{OUT_T}}(total);
    }
}
