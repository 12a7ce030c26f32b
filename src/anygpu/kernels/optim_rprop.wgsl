// Rprop with PyTorch's update rule (torch.optim.Rprop, single-tensor path), one
// parameter tensor per dispatch, everything in place:
//   g         = grad_sign * grad
//   factor    = etaplus if g * prev > 0, etaminus if < 0, else 1
//   step_size = clamp(step_size * factor, step_size_min, step_size_max)
//   g         = 0 where the sign flipped (g * prev < 0)
//   param     = param - sign(g) * step_size
//   prev      = g
//! include lib/optim_step.wgsl
//! include lib/element_per_thread.wgsl
@group(0) @binding(3) var<storage, read_write> prev: array<f32>;
@group(0) @binding(4) var<storage, read_write> step_size: array<f32>;

fn element(i: u32) {
    var g = signed_grad(i);
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
