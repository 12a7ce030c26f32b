// The part the Adam-family kernels (optim_adam, optim_nadam, optim_radam) share: the leading
// uniform fields, the bindings of grad, param and both moments, and the moment update with
// PyTorch's rule. The including kernel declares `struct Params { m: Moments, ... }` bound at
// @binding(0) as P (Moments is 32 bytes, so the fields after it keep their offsets).
struct Moments {
    n: u32,
    grad_sign: f32,       // -1 when maximizing
    decay: f32,           // decoupled weight decay: 1 - lr * weight_decay (else 1)
    weight_decay: f32,    // L2 term added to the gradient (0 when decoupled)
    beta1_weight: f32,    // 1 - beta1
    beta2: f32,
    beta2_weight: f32,    // 1 - beta2
    eps: f32,
}
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> exp_avg: array<f32>;
@group(0) @binding(4) var<storage, read_write> exp_avg_sq: array<f32>;

// Element i of a 1-d grid of 256-thread workgroups (folded into y past the x limit).
fn element_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

struct MomentStep { p: f32, g: f32, m: f32, v: f32 }

// Decays param[i], forms the gradient and updates both moments of element i in place;
// returns the decayed param, the gradient and the new exp_avg and exp_avg_sq.
fn update_moments(i: u32) -> MomentStep {
    let p = param[i] * P.m.decay;
    let g = P.m.grad_sign * grad[i] + P.m.weight_decay * p;
    let m0 = exp_avg[i];
    let w = P.m.beta1_weight;
    // torch's lerp: two forms, for weights below and above one half.
    let m = select(g - (g - m0) * (1.0 - w), m0 + w * (g - m0), w < 0.5);
    let v = exp_avg_sq[i] * P.m.beta2 + (P.m.beta2_weight * g) * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    return MomentStep(p, g, m, v);
}
