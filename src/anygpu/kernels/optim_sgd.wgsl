// SGD with PyTorch's update rule, one parameter tensor per dispatch, in place:
//   d   = grad_sign * grad + weight_decay * param
//   buf = d                                  (first step)
//   buf = momentum * buf + (1 - dampening) * d (later steps)
//   d   = d + momentum * buf  (nesterov)  or  buf
//   param = param - lr * d
// Entry point `sgd` is plain SGD (no momentum buffer); `sgd_momentum` keeps one.
struct Params {
    n: u32,
    lr: f32,
    momentum: f32,
    dampening_keep: f32,  // 1 - dampening
    weight_decay: f32,
    grad_sign: f32,       // -1 when maximizing
    nesterov: u32,
    first: u32,           // 1 on the step that creates the momentum buffer
}
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> param: array<f32>;
@group(0) @binding(3) var<storage, read_write> momentum_buf: array<f32>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * 256u;
}

fn decayed_grad(i: u32) -> f32 {
    return P.grad_sign * grad[i] + P.weight_decay * param[i];
}

@compute @workgroup_size(256)
fn sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= P.n) { return; }
    let d = decayed_grad(i);
    param[i] = param[i] - P.lr * d;
}

@compute @workgroup_size(256)
fn sgd_momentum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= P.n) { return; }
    var d = decayed_grad(i);
    var buf = d;
    if (P.first == 0u) {
        buf = P.momentum * momentum_buf[i] + P.dampening_keep * d;
    }
    momentum_buf[i] = buf;
    if (P.nesterov != 0u) {
        d = d + P.momentum * buf;
    } else {
        d = buf;
    }
    param[i] = param[i] - P.lr * d;
}
