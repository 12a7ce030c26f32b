// The fixed suite of `anygpu info --measure` (runtime/measure.py): a plain matmul, the
// same on every adapter (not the tuned family: the suite compares adapters, so it must not
// depend on what a tuner found), and an almost empty kernel whose dispatches measure the
// per-dispatch overhead.

struct Params {
    m: u32,
    n: u32,
    k: u32,
    _pad: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

// c (m x n) = a (m x k) @ b (k x n), row-major; one output per invocation, no shared
// memory or barriers (software drivers run workgroup barriers very slowly, and the suite
// must finish in about a second there).
@compute @workgroup_size(8, 8)
fn matmul(@builtin(global_invocation_id) id: vec3<u32>) {
    let row = id.y;
    let col = id.x;
    if (row >= params.m || col >= params.n) {
        return;
    }
    var acc = 0.0;
    for (var i = 0u; i < params.k; i++) {
        acc += a[row * params.k + i] * b[i * params.n + col];
    }
    c[row * params.n + col] = acc;
}

// One invocation adds 1 to c[0]: the work is nil, what remains is the cost of a dispatch.
@compute @workgroup_size(1)
fn touch() {
    c[0] = c[0] + 1.0;
}
