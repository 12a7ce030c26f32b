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
//! include lib/adam_moments.wgsl
//! include lib/element_per_thread.wgsl

fn element(i: u32) {
    let s = update_moments(i);
    let denom = sqrt(s.v / P.bias_correction2) + P.eps;
    let stepped = s.p + P.grad_coef * (s.g / denom);
    param[i] = stepped + P.avg_coef * (s.m / denom);
}
