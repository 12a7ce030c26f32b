// Rprop with PyTorch's update rule (torch.optim.Rprop, single-tensor path), one
// parameter tensor per dispatch, everything in place:
//   g         = grad_sign * grad
//   factor    = etaplus if g * prev > 0, etaminus if < 0, else 1
//   step_size = clamp(step_size * factor, step_size_min, step_size_max)
//   g         = 0 where the sign flipped (g * prev < 0)
//   param     = param - sign(g) * step_size
//   prev      = g
struct Params {
    n: u32,
    grad_sign: f32,       // -1 when maximizing
    etaminus: f32,
    etaplus: f32,
    step_size_min: f32,
    step_size_max: f32,
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> prev: array<f32>;
@group(0) @binding(4) var<storage, read_write> step_size: array<f32>;

@compute @workgroup_size(256)
fn rprop(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    var g = P.grad_sign * grad[i];
    let agreement = sign(g * prev[i]);
    var factor = 1.0;
    if (agreement > 0.0) {
        factor = P.etaplus;
    } else if (agreement < 0.0) {
        factor = P.etaminus;
        g = 0.0;
    }
    let size = clamp(step_size[i] * factor, P.step_size_min, P.step_size_max);
    step_size[i] = size;
    param[i] = param[i] - sign(g) * size;
    prev[i] = g;
}
