// RMSprop with PyTorch's update rule (torch.optim.RMSprop, single-tensor path),
// one parameter tensor per dispatch, everything in place:
//   g          = grad_sign * grad + weight_decay * param
//   square_avg = square_avg * alpha + (1 - alpha) * g * g
//   centered:  grad_avg = lerp(grad_avg, g, 1 - alpha); avg = sqrt(square_avg - grad_avg^2) + eps
//   otherwise: avg = sqrt(square_avg) + eps
//   momentum:  buf = momentum * buf + g / avg; param = param - lr * buf
//   otherwise: param = param - lr * g / avg
// Four entry points, one per variant; only the variant's state is bound. The binding
// numbers of grad_avg and momentum_buf are filled in per variant ({{GRAD_AVG_BINDING}},
// {{MOMENTUM_BINDING}}): the state a variant keeps comes right after square_avg.
//! include lib/optim_step.wgsl
//! include lib/square_avg.wgsl
@group(0) @binding({{GRAD_AVG_BINDING}}) var<storage, read_write> grad_avg: array<f32>;
@group(0) @binding({{MOMENTUM_BINDING}}) var<storage, read_write> momentum_buf: array<f32>;

// Updates square_avg; returns (param, g, square_avg).
fn squares(i: u32) -> vec3<f32> {
    let p = param[i];
    let g = signed_grad(i) + P.weight_decay * p;
    return vec3<f32>(p, g, update_square_avg(i, g, P.alpha, P.alpha_weight));
}

// Updates grad_avg; returns sqrt(square_avg - grad_avg^2) + eps.
fn centered_avg(i: u32, g: f32, v: f32) -> f32 {
    let m = torch_lerp(grad_avg[i], g, P.alpha_weight);
    grad_avg[i] = m;
    return sqrt(v - m * m) + P.eps;
}

fn with_momentum(i: u32, p: f32, g: f32, avg: f32) {
    let buf = momentum_buf[i] * P.momentum + g / avg;
    momentum_buf[i] = buf;
    param[i] = p + P.neg_lr * buf;
}

@compute @workgroup_size(256)
fn rmsprop(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n) { return; }
    let s = squares(i);
    param[i] = s.x + P.neg_lr * (s.y / (sqrt(s.z) + P.eps));
}

@compute @workgroup_size(256)
fn rmsprop_centered(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n) { return; }
    let s = squares(i);
    param[i] = s.x + P.neg_lr * (s.y / centered_avg(i, s.y, s.z));
}

@compute @workgroup_size(256)
fn rmsprop_momentum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n) { return; }
    let s = squares(i);
    with_momentum(i, s.x, s.y, sqrt(s.z) + P.eps);
}

@compute @workgroup_size(256)
fn rmsprop_centered_momentum(@builtin(global_invocation_id) gid: vec3<u32>,
                             @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n) { return; }
    let s = squares(i);
    with_momentum(i, s.x, s.y, centered_avg(i, s.y, s.z));
}
