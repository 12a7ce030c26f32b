// Adamax with PyTorch's update rule (torch.optim.Adamax, single-tensor path), one
// parameter tensor per dispatch, everything in place:
//   g       = grad_sign * grad + weight_decay * param
//   exp_avg = lerp(exp_avg, g, 1 - beta1)
//   exp_inf = max(exp_inf * beta2, |g| + eps)
//   param   = param - clr * exp_avg / exp_inf
// The host computes clr = lr / (1 - beta1^t) in double precision.
//! include lib/optim_step.wgsl
//! include lib/element_per_thread.wgsl
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_inf: array<f32>;

fn element(i: u32) {
    let p = param[i];
    let g = signed_grad(i) + P.weight_decay * p;
    let m = torch_lerp(exp_avg[i], g, P.beta1_weight);
    let u = max(exp_inf[i] * P.beta2, abs(g) + P.eps);
    exp_avg[i] = m;
    exp_inf[i] = u;
    param[i] = p + P.neg_clr * (m / u);
}
