// Integer matmul: C[z] = A[z] (m x k) @ B[z] (k x n), contiguous i32, one thread per output.
// Exact (wrapping at 32 bits); integer matmuls are rare and small, so no tiling.
struct Params { m: u32, n: u32, k: u32, total: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> A: array<i32>;
@group(0) @binding(2) var<storage, read> B: array<i32>;
@group(0) @binding(3) var<storage, read_write> C: array<i32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.total) { return; }
    let z = i / (P.m * P.n);
    let row = (i / P.n) % P.m;
    let col = i % P.n;
    let a0 = z * P.m * P.k + row * P.k;
    let b0 = z * P.k * P.n + col;
    var acc = 0;
    for (var t = 0u; t < P.k; t = t + 1u) {
        acc = acc + A[a0 + t] * B[b0 + t * P.n];
    }
    C[i] = acc;
}
