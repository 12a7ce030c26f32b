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
    m: Moments,
    bias_correction1: f32,
    bias_correction2_sqrt: f32,
    lr: f32,
    rect: f32,
    rectified: u32,
}
@group(0) @binding(0) var<uniform> P: Params;
//! include lib/adam_moments.wgsl

@compute @workgroup_size(256)
fn radam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.m.n) { return; }
    let s = update_moments(i);
    var update = s.m / P.bias_correction1 * P.lr;
    if (P.rectified != 0u) {
        update = update * (P.bias_correction2_sqrt / (sqrt(s.v) + P.m.eps)) * P.rect;
    }
    param[i] = s.p - update;
}
