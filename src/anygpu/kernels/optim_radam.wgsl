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
//! include lib/adam_moments.wgsl
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let s = update_moments(i);
    var update = s.m / P.bias_correction1 * P.lr;
    if (P.rectified != 0u) {
        update = update * (P.bias_correction2_sqrt / (sqrt(s.v) + P.eps)) * P.rect;
    }
    param[i] = s.p - update;
}
