{{ENABLE}}
// Gradient of the causal softmax (kernels/softmax_causal.wgsl), one workgroup per row, from
// its output y (0 at the masked columns c > i of row i of each block of `length` rows):
//   dx[r, c] = y[r, c] * (grad[r, c] - dot),  dot = sum_c' grad[r, c'] * y[r, c'],
// the kept columns' terms only, as a masked y is 0. As torch, which multiplies through:
// a non-finite grad at a masked column makes dot NaN (grad * 0), and a masked dx is
// 0 * (grad - dot), NaN where dot is not finite (or that grad is not: then dot is NaN).
// So a masked grad is read once, to see whether it is finite; a masked y never.
struct Params { rows: u32, cols: u32, length: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<{{T}}>;
@group(0) @binding(2) var<storage, read> y: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> dx: array<{{T}}>;

const WG: u32 = {{WG}}u;
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return P.rows; }

//! include lib/float_bits.wgsl

fn row_body(row: u32, tid: u32) {
    let base = row * P.cols;
    let kept = min(P.cols, row % P.length + 1u);

    var local_dot = 0.0;
    for (var c = tid; c < kept; c = c + WG) { local_dot = local_dot + f32(grad[base + c]) * f32(y[base + c]); }
    var local_poison = 0.0;
    for (var c = kept + tid; c < P.cols; c = c + WG) {
        if (non_finite(f32(grad[base + c]))) { local_poison = 1.0; }
    }
    let summed = workgroup_sum(tid, local_dot);
    let poisoned = workgroup_max(tid, local_poison) > 0.0;

    var nan_bits = 0x7fc00000u;  // a var: Tint refuses a NaN made by a constant expression
    let nan = bitcast<f32>(nan_bits);
    let dot = select(summed, nan, poisoned);
    for (var c = tid; c < kept; c = c + WG) { dx[base + c] = {{T}}(f32(y[base + c]) * (f32(grad[base + c]) - dot)); }
    let masked = select(0.0, nan, non_finite(dot));
    for (var c = kept + tid; c < P.cols; c = c + WG) { dx[base + c] = {{T}}(masked); }
}
