// RAdam with PyTorch's update rule (torch.optim.RAdam, single-tensor path), one
// parameter tensor per dispatch, everything in place:
//   param      = param * decay                            (decoupled: decay = 1 - lr * weight_decay)
//   g          = grad_sign * grad + weight_decay * param   (L2 term; 0 when decoupled)
//   exp_avg    = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g
//   update     = exp_avg / (1 - beta1^t) * lr
//   rectified (rho_t > 5): update = update * (sqrt(1 - beta2^t) / (sqrt(exp_avg_sq) + eps)) * rect
//   param      = param - update
// The host decides whether the step is rectified and computes rect in double precision.
struct Params {
    n: u32,
    grad_sign: f32,       // -1 when maximizing
    decay: f32,
    weight_decay: f32,
    beta1_weight: f32,    // 1 - beta1
    beta2: f32,
    beta2_weight: f32,    // 1 - beta2
    eps: f32,
    bias_correction1: f32,
    bias_correction2_sqrt: f32,
    lr: f32,
    rect: f32,
    rectified: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg_sq: array<f32>;

@compute @workgroup_size(256)
fn radam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
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
    var update = m / P.bias_correction1 * P.lr;
    if (P.rectified != 0u) {
        update = update * (P.bias_correction2_sqrt / (sqrt(v) + P.eps)) * P.rect;
    }
    param[i] = p - update;
}
