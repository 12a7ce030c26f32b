// Adagrad with PyTorch's update rule (torch.optim.Adagrad, dense single-tensor path),
// one parameter tensor per dispatch, everything in place:
//   g     = grad_sign * grad + weight_decay * param
//   sum   = sum + g * g
//   param = param - clr * g / (sqrt(sum) + eps)
// The host computes clr = lr / (1 + (step - 1) * lr_decay) in double precision.
struct Params {
    n: u32,
    grad_sign: f32,       // -1 when maximizing
    weight_decay: f32,
    eps: f32,
    neg_clr: f32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> sum: array<f32>;

@compute @workgroup_size(256)
fn adagrad(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let p = param[i];
    let g = P.grad_sign * grad[i] + P.weight_decay * p;
    let s = sum[i] + g * g;
    sum[i] = s;
    param[i] = p + P.neg_clr * (g / (sqrt(s) + P.eps));
}
