// Backward of cross_entropy.wgsl, one thread per logit (r, c), p = softmax(x)[r, c]
// (p = 0 when log_probs = 1):
//   d nll/dx_c    = w_t * (p - [c == t])
//   d smooth/dx_c = W * p - w_c                 (W = sum_j w_j)
//   grad_logits = grad_parts[r] * d nll + grad_parts[rows + r] * d smooth; 0 on ignored rows.
// mean = 1 (the backward of cross_entropy_mean.wgsl): grad_parts holds the loss's one gradient g,
// and the nll gradient of every row is g / stats[2 * rows] (the sum of w_t), smooth's 0.
struct Params { rows: u32, classes: u32, ignore_index: i32, log_probs: u32, mean: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad_parts: array<f32>;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read> targets: array<i32>;
@group(0) @binding(4) var<storage, read> weight: array<f32>;
@group(0) @binding(5) var<storage, read> stats: array<f32>;
@group(0) @binding(6) var<storage, read_write> grad_logits: array<f32>;

// Whether a derivative contributes: nonzero, or NaN (a bit test: `d != 0.0` is false for a NaN
// here, as compiled by lavapipe, which dropped the NaN that torch gives a row with a NaN logit).
fn counts(d: f32) -> bool { return d != 0.0 || (bitcast<u32>(d) & 0x7fffffffu) > 0x7f800000u; }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.rows * P.classes) { return; }
    let r = i / P.classes;
    let c = i % P.classes;
    let target_class = targets[r];
    if (target_class == P.ignore_index || target_class < 0 || target_class >= i32(P.classes)) {
        grad_logits[i] = 0.0;
        return;
    }
    var p = 0.0;
    if (P.log_probs == 0u) { p = exp(logits[i] - stats[2u * r]); }
    let w_t = weight[u32(target_class)];
    var hit = 0.0;
    if (i32(c) == target_class) { hit = 1.0; }
    let d_nll = w_t * (p - hit);
    if (P.mean != 0u) {
        grad_logits[i] = select(0.0, (grad_parts[0] / stats[2u * P.rows]) * d_nll, counts(d_nll));
        return;
    }
    let d_smooth = stats[2u * r + 1u] * p - weight[c];
    // Select, not multiply: a zero derivative gives 0 even for an infinite upstream gradient
    // (inf * 0 would be NaN where torch has 0).
    grad_logits[i] = select(0.0, grad_parts[r] * d_nll, counts(d_nll))
                   + select(0.0, grad_parts[P.rows + r] * d_smooth, counts(d_smooth) && grad_parts[P.rows + r] != 0.0);
}
