// Fused log-softmax + negative log-likelihood, one workgroup per row of logits [rows, classes].
// For row r with target t and class weights w (log_probs = 1: x already holds log-probabilities,
// so lse = 0):
//   lse          = log(sum_j exp(x_j))                    (max-shifted)
//   parts[r]        = nll    = -w_t * (x_t - lse)          (0 where t == ignore_index)
//   parts[rows + r] = smooth = -sum_j w_j * (x_j - lse)    (label smoothing; 0 where ignored)
//   stats[2r], stats[2r+1] = lse, sum_j w_j               (for the backward)
//   row_weight[r]   = w_t (0 where ignored): the denominator of reduction='mean'
// A target outside [0, classes) that is not ignore_index gives NaN.
struct Params { rows: u32, classes: u32, ignore_index: i32, log_probs: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read> weight: array<f32>;
@group(0) @binding(4) var<storage, read_write> parts: array<f32>;
@group(0) @binding(5) var<storage, read_write> stats: array<f32>;
@group(0) @binding(6) var<storage, read_write> row_weight: array<f32>;

const WG: u32 = 64u;
//! include lib/row_per_workgroup.wgsl
fn row_count() -> u32 { return P.rows; }

fn row_body(r: u32, t: u32) {
    let base = r * P.classes;
    var row_max = 0.0;
    if (P.log_probs == 0u) {
        var m = -3.40282346e38;  // -FLT_MAX (Tint refuses 3.4028235e38: above FLT_MAX before rounding)
        for (var c = t; c < P.classes; c += WG) { m = max(m, logits[base + c]); }
        row_max = workgroup_max(t, m);  // P.log_probs is uniform: every thread takes this branch
    }
    var sum_exp = 0.0;
    var sum_wx = 0.0;
    var sum_w = 0.0;
    for (var c = t; c < P.classes; c += WG) {
        let v = logits[base + c];
        sum_exp += exp(v - row_max);
        sum_wx += weight[c] * v;
        sum_w += weight[c];
    }
    let sums = workgroup_sum4(t, vec4<f32>(sum_exp, sum_wx, sum_w, 0.0));
    if (t != 0u) { return; }
    var lse = 0.0;
    if (P.log_probs == 0u) { lse = row_max + log(sums.x); }
    let total_w = sums.z;
    stats[2u * r] = lse;
    stats[2u * r + 1u] = total_w;
    let target_class = targets[r];
    if (target_class == P.ignore_index) {
        parts[r] = 0.0;
        parts[P.rows + r] = 0.0;
        row_weight[r] = 0.0;
        return;
    }
    if (target_class < 0 || target_class >= i32(P.classes)) {
        var nan_bits = 0x7fc00000u;  // a var: Tint refuses a NaN made by a constant expression
        let nan = bitcast<f32>(nan_bits);
        parts[r] = nan;
        parts[P.rows + r] = nan;
        row_weight[r] = nan;
        return;
    }
    let w_t = weight[u32(target_class)];
    parts[r] = -w_t * (logits[base + u32(target_class)] - lse);
    parts[P.rows + r] = lse * total_w - sums.y;
    row_weight[r] = w_t;
}
