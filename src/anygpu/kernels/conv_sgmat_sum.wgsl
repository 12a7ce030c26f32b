// The split weight gradient of ops/conv_sgmat.py summed: out[i] = f16(sum_s partial[s*n + i])
// over the `splits` f32 partials, one thread per element.
enable f16;
struct Params { n: u32, splits: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> partial: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f16>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    var acc = 0.0;
    for (var s = 0u; s < P.splits; s++) {
        acc += partial[s * P.n + i];
    }
    out[i] = f16(acc);
}
