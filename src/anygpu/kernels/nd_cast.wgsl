// Conversions between the 4-byte dtypes: mode 0 f32 -> i32 (truncate), 1 i32 -> f32, 2 u32 -> f32.
struct Params { n: u32, mode: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let v = x[i];
    if (P.mode == 0u) {
        out[i] = bitcast<u32>(i32(bitcast<f32>(v)));
    } else if (P.mode == 1u) {
        out[i] = bitcast<u32>(f32(bitcast<i32>(v)));
    } else {
        out[i] = bitcast<u32>(f32(v));
    }
}
