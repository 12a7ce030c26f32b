// The part the Adam-family kernels (optim_adam, optim_nadam, optim_radam) share: the bindings
// of both moments and their update with PyTorch's rule. P holds the fields of _MOMENTS in
// anygpu/ops/optim.py (decay, weight_decay, beta1_weight = 1 - beta1, beta2, beta2_weight =
// 1 - beta2, eps) and the kernel's own.
//! include lib/optim_step.wgsl
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg_sq: array<f32>;

struct MomentStep { p: f32, g: f32, m: f32, v: f32 }

// Decays param[i], forms the gradient and updates both moments of element i in place;
// returns the decayed param, the gradient and the new exp_avg and exp_avg_sq.
fn update_moments(i: u32) -> MomentStep {
    let p = param[i] * P.decay;
    let g = signed_grad(i) + P.weight_decay * p;
    let m = torch_lerp(exp_avg[i], g, P.beta1_weight);
    let v = exp_avg_sq[i] * P.beta2 + (P.beta2_weight * g) * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    return MomentStep(p, g, m, v);
}
