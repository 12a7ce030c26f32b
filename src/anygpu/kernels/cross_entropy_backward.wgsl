// Backward of cross_entropy.wgsl, one thread per logit (r, c), p = softmax(x)[r, c]
// (p = 0 when log_probs = 1):
//   d nll/dx_c    = w_t * (p - [c == t])
//   d smooth/dx_c = W * p - w_c                 (W = sum_j w_j)
//   grad_logits = grad_parts[r] * d nll + grad_parts[rows + r] * d smooth; 0 on ignored rows.
struct Params { rows: u32, classes: u32, ignore_index: i32, log_probs: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad_parts: array<f32>;
@group(0) @binding(2) var<storage, read> logits: array<f32>;
@group(0) @binding(3) var<storage, read> targets: array<i32>;
@group(0) @binding(4) var<storage, read> weight: array<f32>;
@group(0) @binding(5) var<storage, read> stats: array<f32>;
@group(0) @binding(6) var<storage, read_write> grad_logits: array<f32>;

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
    let d_smooth = stats[2u * r + 1u] * p - weight[c];
    // Select, not multiply: a zero derivative gives 0 even for an infinite upstream gradient
    // (inf * 0 would be NaN where torch has 0).
    grad_logits[i] = select(0.0, grad_parts[r] * d_nll, d_nll != 0.0)
                   + select(0.0, grad_parts[P.rows + r] * d_smooth, d_smooth != 0.0 && grad_parts[P.rows + r] != 0.0);
}
