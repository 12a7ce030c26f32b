// Adadelta with PyTorch's update rule (torch.optim.Adadelta, single-tensor path),
// one parameter tensor per dispatch, everything in place:
//   g          = grad_sign * grad + weight_decay * param
//   square_avg = square_avg * rho + (1 - rho) * g * g
//   delta      = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
//   acc_delta  = acc_delta * rho + (1 - rho) * delta * delta
//   param      = param - lr * delta
//! include lib/optim_step.wgsl
//! include lib/element_per_thread.wgsl
//! include lib/square_avg.wgsl
@group(0) @binding(4) var<storage, read_write> acc_delta: array<f32>;

fn element(i: u32) {
    let p = param[i];
    let g = signed_grad(i) + P.weight_decay * p;
    let v = update_square_avg(i, g, P.rho, P.rho_weight);
    let acc = acc_delta[i];
    let delta = sqrt(acc + P.eps) / sqrt(v + P.eps) * g;
    acc_delta[i] = acc * P.rho + (P.rho_weight * delta) * delta;
    param[i] = p + P.neg_lr * delta;
}
