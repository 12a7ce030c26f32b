// SGD with PyTorch's update rule, one parameter tensor per dispatch, in place:
//   d   = grad_sign * grad + weight_decay * param
//   buf = d                                  (first step)
//   buf = momentum * buf + (1 - dampening) * d (later steps)
//   d   = d + momentum * buf  (nesterov)  or  buf
//   param = param - lr * d
// Entry point `sgd` is plain SGD (no momentum buffer); `sgd_momentum` keeps one.
// The FOUND_INF placeholder defines skipped() and unset(v): under a GradScaler (ops/optim.py sgd_step's
// found_inf) the update is skipped where the scaler's flag is set, and a momentum buffer made on a
// step that may be skipped holds a marker until its first update that is not (then buf = d).
//! include lib/optim_step.wgsl
@group(0) @binding(3) var<storage, read_write> momentum_buf: array<f32>;
{{FOUND_INF}}

fn decayed_grad(i: u32) -> f32 {
    return signed_grad(i) + P.weight_decay * param[i];
}

@compute @workgroup_size(256)
fn sgd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n || skipped()) { return; }
    let d = decayed_grad(i);
    param[i] = param[i] - P.lr * d;
}

@compute @workgroup_size(256)
fn sgd_momentum(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = element_index(gid, nwg);
    if (i >= P.n || skipped()) { return; }
    var d = decayed_grad(i);
    var buf = d;
    if (P.first == 0u) {
        let old = momentum_buf[i];
        if (!unset(old)) {
            buf = P.momentum * old + P.dampening_keep * d;
        }
    }
    momentum_buf[i] = buf;
    if (P.nesterov != 0u) {
        d = d + P.momentum * buf;
    } else {
        d = buf;
    }
    param[i] = param[i] - P.lr * d;
}
