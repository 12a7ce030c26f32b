// Sums along the inner axis of a [rows, inner] array, optionally of a term of two arrays:
//   out[row * n_chunks + chunk] = scale * sum over i in the chunk of TERM(a[row, i], b[row, i])
// The inner axis is cut into n_chunks chunks of chunk_len; the caller sums the partials
// again when n_chunks > 1 (a tree of passes, so a long sum never sits in one thread).
// Two entry points: `per_workgroup` (one workgroup per (row, chunk), a workgroup-memory
// tree) for long rows, `per_thread` (one thread per row, n_chunks = 1) for short ones.
struct Params { rows: u32, inner: u32, chunk_len: u32, n_chunks: u32, scale: f32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> in_a: array<f32>;
@group(0) @binding(2) var<storage, read> in_b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const WG: u32 = 256u;
//! include lib/workgroup_reduce.wgsl

fn term(i: u32) -> f32 {
    let a = in_a[i];
    let b = in_b[i];
    return {{TERM}};
}

@compute @workgroup_size(256)
fn per_workgroup(@builtin(local_invocation_index) tid: u32,
                 @builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
    let slot = wid.x + wid.y * nwg.x;
    if (slot >= P.rows * P.n_chunks) { return; }
    let row = slot / P.n_chunks;
    let begin = (slot % P.n_chunks) * P.chunk_len;
    let end = min(begin + P.chunk_len, P.inner);
    let base = row * P.inner;
    var acc = 0.0;
    for (var i = begin + tid; i < end; i = i + WG) {
        acc = acc + term(base + i);
    }
    let total = workgroup_sum(tid, acc);
    if (tid == 0u) { out[slot] = total * P.scale; }
}

@compute @workgroup_size(256)
fn per_thread(@builtin(global_invocation_id) gid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = gid.x + gid.y * nwg.x * WG;
    if (row >= P.rows) { return; }
    let base = row * P.inner;
    var acc = 0.0;
    for (var i = 0u; i < P.inner; i = i + 1u) {
        acc = acc + term(base + i);
    }
    out[row] = acc * P.scale;
}
