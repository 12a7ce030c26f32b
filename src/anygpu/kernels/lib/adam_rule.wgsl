// Adam's rule for one element, as pure functions of its values (PyTorch's order of
// operations), shared by the one-tensor kernels (lib/adam_moments.wgsl, optim_adam.wgsl) and
// the multi-tensor one (optim_adam_multi.wgsl), so both give the same bits. They read the
// uniforms P.decay, P.grad_sign, P.weight_decay, P.beta1_weight (1 - beta1), P.beta2,
// P.beta2_weight (1 - beta2) and P.eps.
//! include lib/torch_lerp.wgsl

struct MomentStep { p: f32, g: f32, m: f32, v: f32 }

// The decayed parameter, the gradient as the rule sees it and both new moments.
fn adam_moments(param_in: f32, grad_in: f32, exp_avg_in: f32, exp_avg_sq_in: f32) -> MomentStep {
    let p = param_in * P.decay;
    let g = P.grad_sign * grad_in + P.weight_decay * p;
    let m = torch_lerp(exp_avg_in, g, P.beta1_weight);
    let v = exp_avg_sq_in * P.beta2 + (P.beta2_weight * g) * g;
    return MomentStep(p, g, m, v);
}

// The new parameter: p - step_size * m / (sqrt(v) / sqrt(1 - beta2^t) + eps).
fn adam_param(p: f32, m: f32, v: f32, bias_correction2_sqrt: f32, neg_step_size: f32) -> f32 {
    let denom = sqrt(v) / bias_correction2_sqrt + P.eps;
    return p + neg_step_size * (m / denom);
}
