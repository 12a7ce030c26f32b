// The part the Adam-family kernels (optim_adam, optim_nadam, optim_radam) share: the bindings
// of both moments and their update with PyTorch's rule. P holds the fields of _MOMENTS in
// anygpu/ops/optim.py (decay, weight_decay, beta1_weight = 1 - beta1, beta2, beta2_weight =
// 1 - beta2, eps) and the kernel's own.
//! include lib/optim_step.wgsl
//! include lib/adam_rule.wgsl
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg_sq: array<f32>;

// Decays param[i], forms the gradient and updates both moments of element i in place
// (lib/adam_rule.wgsl's rule); returns the decayed param, the gradient and the new moments.
fn update_moments(i: u32) -> MomentStep {
    let s = adam_moments(param[i], grad[i], exp_avg[i], exp_avg_sq[i]);
    exp_avg[i] = s.m;
    exp_avg_sq[i] = s.v;
    return s;
}
