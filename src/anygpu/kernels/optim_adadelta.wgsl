// Adadelta with PyTorch's update rule (torch.optim.Adadelta, single-tensor path),
// one parameter tensor per dispatch, everything in place:
//   g          = grad_sign * grad + weight_decay * param
//   square_avg = square_avg * rho + (1 - rho) * g * g
//   delta      = sqrt(acc_delta + eps) / sqrt(square_avg + eps) * g
//   acc_delta  = acc_delta * rho + (1 - rho) * delta * delta
//   param      = param - lr * delta
struct Params {
    n: u32,
    grad_sign: f32,       // -1 when maximizing
    weight_decay: f32,
    rho: f32,
    rho_weight: f32,      // 1 - rho
    eps: f32,
    neg_lr: f32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> square_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> acc_delta: array<f32>;

@compute @workgroup_size(256)
fn adadelta(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let p = param[i];
    let g = P.grad_sign * grad[i] + P.weight_decay * p;
    let v = square_avg[i] * P.rho + (P.rho_weight * g) * g;
    square_avg[i] = v;
    let acc = acc_delta[i];
    let delta = sqrt(acc + P.eps) / sqrt(v + P.eps) * g;
    acc_delta[i] = acc * P.rho + (P.rho_weight * delta) * delta;
    param[i] = p + P.neg_lr * delta;
}
