// Adagrad with PyTorch's update rule (torch.optim.Adagrad, dense single-tensor path),
// one parameter tensor per dispatch, everything in place:
//   g     = grad_sign * grad + weight_decay * param
//   sum   = sum + g * g
//   param = param - clr * g / (sqrt(sum) + eps)
// The host computes clr = lr / (1 + (step - 1) * lr_decay) in double precision.
//! include lib/optim_step.wgsl
//! include lib/element_per_thread.wgsl
@group(0) @binding(3) var<storage, read_write> sum: array<f32>;

fn element(i: u32) {
    let p = param[i];
    let g = signed_grad(i) + P.weight_decay * p;
    let s = sum[i] + g * g;
    sum[i] = s;
    param[i] = p + P.neg_clr * (g / (sqrt(s) + P.eps));
}
