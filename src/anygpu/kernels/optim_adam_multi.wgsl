// Adam / AdamW over several parameter tensors per dispatch (torch's multi-tensor path),
// each tensor with its own bindings, everything in place, with exactly the rule of
// optim_adam.wgsl (lib/adam_rule.wgsl's functions, so both give the same bits). Tensor k has
// P.tensors[k] = (n, first workgroup, bits of sqrt(1 - beta2^t), bits of -lr / (1 - beta1^t)):
// its own step count t; with the step counts on the GPU (ops/optim.py adam_multi_step_counted)
// the third word is the tensor's slot of `steps` instead, which optim_adam_steps.wgsl filled
// (the STEPS placeholder defines skipped(t) and scalars(t) either way). Its workgroups follow
// those of tensor k - 1, one element per thread.
// The ARRAYS placeholder declares grad0.. (read), param0.., exp_avg0.., exp_avg_sq0.. and, with AMSGRAD,
// max_exp_avg_sq0.. (read_write) with <name>_load(k, i) / <name>_store(k, i, value).
//! include lib/multi_tensor.wgsl
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
{{ARRAYS}}
const AMSGRAD: bool = {{AMSGRAD}};
{{STEPS}}
//! include lib/adam_rule.wgsl

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = element_of(tid, wid, nwg);
    let k = e.x;
    let i = e.y;
    let t = P.tensors[k];
    if (e.z == 0u || skipped(t)) { return; }
    let s = adam_moments(param_load(k, i), grad_load(k, i), exp_avg_load(k, i), exp_avg_sq_load(k, i));
    exp_avg_store(k, i, s.m);
    exp_avg_sq_store(k, i, s.v);
    var v = s.v;
    if (AMSGRAD) {
        v = max(max_exp_avg_sq_load(k, i), s.v);
        max_exp_avg_sq_store(k, i, v);
    }
    let c = scalars(t);
    param_store(k, i, adam_param(s.p, s.m, v, c.x, c.y));
}
