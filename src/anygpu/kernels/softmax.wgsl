{{ENABLE}}
// Row-wise softmax of a [rows, cols] array, one workgroup per row:
//   y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r)
// Subtracting the row maximum keeps every exponent <= 0, so rows of huge magnitude
// (1e30 beside -1e30) neither overflow nor turn into NaN.
struct Params { rows: u32, cols: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> y: array<{{T}}>;

const WG: u32 = {{WG}}u;
const LOWEST: f32 = -3.40282346e38;  // -FLT_MAX, written at or below it: Tint refuses literals above FLT_MAX
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return P.rows; }

fn row_body(row: u32, tid: u32) {
    let base = row * P.cols;

    var local_max = LOWEST;
    for (var c = tid; c < P.cols; c = c + WG) { local_max = max(local_max, f32(x[base + c])); }
    let row_max = workgroup_max(tid, local_max);

    var local_sum = 0.0;
    for (var c = tid; c < P.cols; c = c + WG) { local_sum = local_sum + exp(f32(x[base + c]) - row_max); }
    let inv_sum = 1.0 / workgroup_sum(tid, local_sum);

    for (var c = tid; c < P.cols; c = c + WG) { y[base + c] = {{T}}(exp(f32(x[base + c]) - row_max) * inv_sum); }
}
