{{ENABLE}}
// Causal row-wise softmax of [rows, cols] scores stacked as blocks of `length` rows (one
// attention head's (length, cols) scores each), one workgroup per row: row i of a block
// keeps columns c <= i (torch's is_causal, the lower triangle aligned top-left), the rest
// read as masked (-inf) and come out 0. The same values as kernels/softmax.wgsl on the
// scores plus a 0/-inf mask (each thread's partial sums add exp(-inf) = 0 there), without
// the mask or its pass; a masked score is read once, only to see whether it poisons the
// row: x + (-inf) is NaN for x NaN or +inf, and torch's row is then NaN.
struct Params { rows: u32, cols: u32, length: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> y: array<{{T}}>;

const WG: u32 = {{WG}}u;
const LOWEST: f32 = -3.40282346e38;  // -FLT_MAX, written at or below it: Tint refuses literals above FLT_MAX
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return P.rows; }

//! include lib/float_bits.wgsl

fn row_body(row: u32, tid: u32) {
    let base = row * P.cols;
    let kept = min(P.cols, row % P.length + 1u);

    var local_max = LOWEST;
    for (var c = tid; c < kept; c = c + WG) { local_max = max(local_max, f32(x[base + c])); }
    var local_poison = 0.0;
    for (var c = kept + tid; c < P.cols; c = c + WG) {
        if (poisons(f32(x[base + c]))) { local_poison = 1.0; }
    }
    let row_max = workgroup_max(tid, local_max);
    let poisoned = workgroup_max(tid, local_poison) > 0.0;

    var local_sum = 0.0;
    for (var c = tid; c < kept; c = c + WG) { local_sum = local_sum + exp(f32(x[base + c]) - row_max); }
    let inv_sum = 1.0 / workgroup_sum(tid, local_sum);

    var nan_bits = 0x7fc00000u;  // a var: Tint refuses a NaN made by a constant expression
    let nan = bitcast<f32>(nan_bits);
    for (var c = tid; c < kept; c = c + WG) {
        y[base + c] = {{T}}(select(exp(f32(x[base + c]) - row_max) * inv_sum, nan, poisoned));
    }
    // exp(-inf - max) / sum, NaN as torch's where the sum is (a kept NaN or +inf) or is 0
    // (every kept score -inf): then 1 / sum is not finite.
    let masked = select(0.0, nan, poisoned || non_finite(inv_sum));
    for (var c = kept + tid; c < P.cols; c = c + WG) { y[base + c] = {{T}}(masked); }
}
