// Nearest-neighbour upsampling of [planes, in_h, in_w] (planes = batch * channels) by
// integer factors: out [planes, in_h*scale_h, in_w*scale_w].
// `forward`: one thread per output, out[pl, oh, ow] = x[pl, oh / scale_h, ow / scale_w].
// `backward`: one thread per input, the sum of the scale_h x scale_w block of grad it fed.
struct Params { n: u32, in_h: u32, in_w: u32, scale_h: u32, scale_w: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
//! include lib/grid_1d.wgsl

// (plane, row, column) of element idx of [planes, h, w].
fn plane_row_col(idx: u32, h: u32, w: u32) -> vec3<u32> {
    return vec3<u32>(idx / (w * h), (idx / w) % h, idx % w);
}

@compute @workgroup_size(256)
fn forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = element_index(gid, nwg);  // n = planes * out_h * out_w
    if (idx >= P.n) { return; }
    let o = plane_row_col(idx, P.in_h * P.scale_h, P.in_w * P.scale_w);
    dst[idx] = src[(o.x * P.in_h + o.y / P.scale_h) * P.in_w + o.z / P.scale_w];
}

@compute @workgroup_size(256)
fn backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = element_index(gid, nwg);  // n = planes * in_h * in_w
    if (idx >= P.n) { return; }
    let i = plane_row_col(idx, P.in_h, P.in_w);
    let out_w = P.in_w * P.scale_w;
    var total = 0.0;
    for (var dy = 0u; dy < P.scale_h; dy = dy + 1u) {
        // Row i.y * scale_h + dy of plane i.x of the [planes, in_h * scale_h, out_w] grad.
        let row = ((i.x * P.in_h + i.y) * P.scale_h + dy) * out_w + i.z * P.scale_w;
        for (var dx = 0u; dx < P.scale_w; dx = dx + 1u) { total = total + src[row + dx]; }
    }
    dst[idx] = total;
}
