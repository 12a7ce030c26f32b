// Adam / AdamW with PyTorch's update rule (torch.optim.Adam, single-tensor path),
// one parameter tensor per dispatch, everything in place:
//   param  = param * decay                          (AdamW: decay = 1 - lr * weight_decay)
//   g      = grad_sign * grad + weight_decay * param (Adam's L2 term; 0 for AdamW)
//   exp_avg    = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g
//   (amsgrad)  max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), used in place of exp_avg_sq below
//   param  = param - step_size * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
// The host computes step_size = lr / (1 - beta1^t) and sqrt(1 - beta2^t) in double precision.
struct Params {
    n: u32,
    grad_sign: f32,       // -1 when maximizing
    decay: f32,
    weight_decay: f32,
    beta1_weight: f32,    // 1 - beta1
    beta2: f32,
    beta2_weight: f32,    // 1 - beta2
    eps: f32,
    bias_correction2_sqrt: f32,
    neg_step_size: f32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg_sq: array<f32>;
@group(0) @binding(5) var<storage, read_write> max_exp_avg_sq: array<f32>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

// Updates both moments of element i; returns (decayed param, exp_avg, exp_avg_sq).
fn moments(i: u32) -> vec3<f32> {
    let p = param[i] * P.decay;
    let g = P.grad_sign * grad[i] + P.weight_decay * p;
    let m0 = exp_avg[i];
    let w = P.beta1_weight;
    // torch's lerp: two forms, for weights below and above one half.
    let m = select(g - (g - m0) * (1.0 - w), m0 + w * (g - m0), w < 0.5);
    let v = exp_avg_sq[i] * P.beta2 + (P.beta2_weight * g) * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    return vec3<f32>(p, m, v);
}

fn apply(i: u32, p: f32, m: f32, v: f32) {
    let denom = sqrt(v) / P.bias_correction2_sqrt + P.eps;
    param[i] = p + P.neg_step_size * (m / denom);
}

@compute @workgroup_size(256)
fn adam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= P.n) { return; }
    let pmv = moments(i);
    apply(i, pmv.x, pmv.y, pmv.z);
}

@compute @workgroup_size(256)
fn adam_amsgrad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= P.n) { return; }
    let pmv = moments(i);
    let v_max = max(max_exp_avg_sq[i], pmv.z);
    max_exp_avg_sq[i] = v_max;
    apply(i, pmv.x, pmv.y, v_max);
}
