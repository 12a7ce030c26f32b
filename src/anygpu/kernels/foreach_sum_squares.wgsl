// Sums of several tensors' elements (or their squares), each tensor its own binding: the first
// pass of clip_grad_norm_'s total norm (anygpu/ops/foreach.py). A job is one tensor (or a
// stretch of one Buffer) of n elements from `offset`, summed in exactly the order of
// anygpu/ops/reduce.py's reduce_inner over one row, so a job's sum has the bits of sum_all
// (on the term's values):
//   n <= SHORT: one thread adds the elements in order (reduce.wgsl's per_thread);
//   otherwise one workgroup per CHUNK elements, each a strided loop and a workgroup tree
//   (reduce.wgsl's per_workgroup); a job of one chunk writes sums[out], a longer one its
//   partials to partials[out + chunk], which the caller sums by the same rule in a next pass.
// The jobs of a dispatch lie one after the other in workgroups: job k has P.jobs[k] =
// (n, offset, first workgroup, out). The ARRAYS placeholder declares the inputs src0.. (bindings 1..)
// and src_load(k, i), the element i of job k's binding.
{{PARAMS}}
@group(0) @binding(0) var<uniform> P: Params;
{{ARRAYS}}
@group(0) @binding({{SUMS_BINDING}}) var<storage, read_write> sums: array<f32>;
@group(0) @binding({{PARTIALS_BINDING}}) var<storage, read_write> partials: array<f32>;

const WG: u32 = 256u;
const CHUNK: u32 = 4096u;   // reduce.py's _CHUNK
const SHORT: u32 = 64u;     // reduce.py's _SHORT_ROW
//! include lib/workgroup_reduce.wgsl

// The summed value of element i of job k: the element itself, or its square rounded to f32
// as a separate multiply kernel stores it (the xor with the uniform zero keeps a driver from
// contracting the product into the sum's addition: ops/fusion.py does the same).
fn term(k: u32, i: u32) -> f32 {
    let a = src_load(k, i);
    return {{TERM}};
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) tid: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let w = wid.x + wid.y * nwg.x;
    if (w >= P.total_workgroups) { return; }
    var k = 0u;
    for (var j = 1u; j < P.count; j = j + 1u) {
        if (P.jobs[j].z <= w) { k = j; }
    }
    let job = P.jobs[k];
    let n = job.x;
    let chunk = w - job.z;
    var acc = 0.0;
    if (n <= SHORT) {
        if (tid == 0u) {
            for (var i = 0u; i < n; i = i + 1u) {
                acc = acc + term(k, job.y + i);
            }
        }
    } else {
        let end = min((chunk + 1u) * CHUNK, n);
        for (var i = chunk * CHUNK + tid; i < end; i = i + WG) {
            acc = acc + term(k, job.y + i);
        }
    }
    let total = workgroup_sum(tid, acc);
    if (tid == 0u) {
        if (n <= SHORT) {
            sums[job.w] = acc;
        } else if (n <= CHUNK) {
            sums[job.w] = total;
        } else {
            partials[job.w + chunk] = total;
        }
    }
}
