// NAdam with PyTorch's update rule (torch.optim.NAdam, single-tensor path), one
// parameter tensor per dispatch, everything in place:
//   param      = param * decay                            (decoupled: decay = 1 - lr * weight_decay)
//   g          = grad_sign * grad + weight_decay * param   (L2 term; 0 when decoupled)
//   exp_avg    = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g
//   denom      = sqrt(exp_avg_sq / (1 - beta2^t)) + eps
//   param      = param + grad_coef * g / denom + avg_coef * exp_avg / denom
// The host computes, in double precision from the momentum schedule mu_t:
//   grad_coef = -lr * (1 - mu_t) / (1 - prod mu_1..t),
//   avg_coef  = -lr * mu_{t+1} / (1 - prod mu_1..t+1).
struct Params {
    n: u32,
    grad_sign: f32,       // -1 when maximizing
    decay: f32,
    weight_decay: f32,
    beta1_weight: f32,    // 1 - beta1
    beta2: f32,
    beta2_weight: f32,    // 1 - beta2
    eps: f32,
    bias_correction2: f32,
    grad_coef: f32,
    avg_coef: f32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg_sq: array<f32>;

@compute @workgroup_size(256)
fn nadam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let p = param[i] * P.decay;
    let g = P.grad_sign * grad[i] + P.weight_decay * p;
    let m0 = exp_avg[i];
    let w = P.beta1_weight;
    // torch's lerp: two forms, for weights below and above one half.
    let m = select(g - (g - m0) * (1.0 - w), m0 + w * (g - m0), w < 0.5);
    let v = exp_avg_sq[i] * P.beta2 + (P.beta2_weight * g) * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    let denom = sqrt(v / P.bias_correction2) + P.eps;
    let stepped = p + P.grad_coef * (g / denom);
    param[i] = stepped + P.avg_coef * (m / denom);
}
