{{ENABLE}}
// Gradient of the row-wise softmax, one workgroup per row, from y = softmax(x):
//   dx[r, c] = y[r, c] * (grad[r, c] - sum_c' grad[r, c'] * y[r, c'])
struct Params { rows: u32, cols: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<{{T}}>;
@group(0) @binding(2) var<storage, read> y: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> dx: array<{{T}}>;

const WG: u32 = {{WG}}u;
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return P.rows; }

fn row_body(row: u32, tid: u32) {
    let base = row * P.cols;

    var local_dot = 0.0;
    for (var c = tid; c < P.cols; c = c + WG) { local_dot = local_dot + f32(grad[base + c]) * f32(y[base + c]); }
    let dot = workgroup_sum(tid, local_dot);

    for (var c = tid; c < P.cols; c = c + WG) { dx[base + c] = {{T}}(f32(y[base + c]) * (f32(grad[base + c]) - dot)); }
}
