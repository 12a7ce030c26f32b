// What the optimizer kernels (optim_*.wgsl, launched by anygpu/ops/optim.py) share: their
// uniforms P, whose struct ({{PARAMS}}) is generated from the update's Params declaration in
// ops/optim.py (each has `n`, the element count, and `grad_sign`, -1 when maximizing), the
// gradient (read) and the parameter (updated in place), the element index and torch's lerp (lib/torch_lerp.wgsl).
// The kernel binds its state from binding 3 on.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
//! include lib/grid_1d.wgsl
//! include lib/torch_lerp.wgsl

// The gradient of element i as the update rule sees it (negated when maximizing).
fn signed_grad(i: u32) -> f32 {
    return P.grad_sign * grad[i];
}
