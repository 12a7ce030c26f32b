// Adamax with PyTorch's update rule (torch.optim.Adamax, single-tensor path), one
// parameter tensor per dispatch, everything in place:
//   g       = grad_sign * grad + weight_decay * param
//   exp_avg = lerp(exp_avg, g, 1 - beta1)
//   exp_inf = max(exp_inf * beta2, |g| + eps)
//   param   = param - clr * exp_avg / exp_inf
// The host computes clr = lr / (1 - beta1^t) in double precision.
struct Params {
    n: u32,
    grad_sign: f32,       // -1 when maximizing
    weight_decay: f32,
    beta1_weight: f32,    // 1 - beta1
    beta2: f32,
    eps: f32,
    neg_clr: f32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_inf: array<f32>;

@compute @workgroup_size(256)
fn adamax(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let p = param[i];
    let g = P.grad_sign * grad[i] + P.weight_decay * p;
    let m0 = exp_avg[i];
    let w = P.beta1_weight;
    // torch's lerp: two forms, for weights below and above one half.
    let m = select(g - (g - m0) * (1.0 - w), m0 + w * (g - m0), w < 0.5);
    let u = max(exp_inf[i] * P.beta2, abs(g) + P.eps);
    exp_avg[i] = m;
    exp_inf[i] = u;
    param[i] = p + P.neg_clr * (m / u);
}
