// Adam / AdamW with PyTorch's update rule (torch.optim.Adam, single-tensor path),
// one parameter tensor per dispatch, everything in place:
//   param  = param * decay                          (AdamW: decay = 1 - lr * weight_decay)
//   g      = grad_sign * grad + weight_decay * param (Adam's L2 term; 0 for AdamW)
//   exp_avg    = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * g * g
//   (amsgrad)  max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), used in place of exp_avg_sq below
//   param  = param - step_size * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
// The host computes step_size = lr / (1 - beta1^t) and sqrt(1 - beta2^t) in double precision,
// or, with the step count on the GPU (ops/optim.py adam_step_counted), optim_adam_steps.wgsl
// does and leaves them in the parameter's slot of `steps`: the STEPS placeholder defines
// skipped() (GradScaler found an inf: nothing is written) and scalars() (the two values).
//! include lib/adam_moments.wgsl
@group(0) @binding(5) var<storage, read_write> max_exp_avg_sq: array<f32>;
{{STEPS}}

fn apply(i: u32, p: f32, m: f32, v: f32) {
    let c = scalars();
    param[i] = adam_param(p, m, v, c.x, c.y);
}

@compute @workgroup_size(256)
fn adam(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n || skipped()) { return; }
    let s = update_moments(i);
    apply(i, s.p, s.m, s.v);
}

@compute @workgroup_size(256)
fn adam_amsgrad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n || skipped()) { return; }
    let s = update_moments(i);
    let v_max = max(max_exp_avg_sq[i], s.v);
    max_exp_avg_sq[i] = v_max;
    apply(i, s.p, s.m, v_max);
}
