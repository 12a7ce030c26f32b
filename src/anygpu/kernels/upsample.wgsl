// Nearest-neighbour upsampling of [planes, in_h, in_w] (planes = batch * channels) by
// integer factors: out [planes, in_h*scale_h, in_w*scale_w].
// `forward`: one thread per output, out[pl, oh, ow] = x[pl, oh / scale_h, ow / scale_w].
// `backward`: one thread per input, the sum of the scale_h x scale_w block of grad it fed.
struct Params { n: u32, in_h: u32, in_w: u32, scale_h: u32, scale_w: u32 }
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn forward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 256u;  // n = planes * out_h * out_w
    if (idx >= P.n) { return; }
    let out_w = P.in_w * P.scale_w;
    let out_h = P.in_h * P.scale_h;
    let ow = idx % out_w;
    let oh = (idx / out_w) % out_h;
    let plane = idx / (out_w * out_h);
    dst[idx] = src[(plane * P.in_h + oh / P.scale_h) * P.in_w + ow / P.scale_w];
}

@compute @workgroup_size(256)
fn backward(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = gid.x + gid.y * nwg.x * 256u;  // n = planes * in_h * in_w
    if (idx >= P.n) { return; }
    let out_w = P.in_w * P.scale_w;
    let out_h = P.in_h * P.scale_h;
    let iw = idx % P.in_w;
    let ih = (idx / P.in_w) % P.in_h;
    let plane = idx / (P.in_w * P.in_h);
    var total = 0.0;
    for (var dy = 0u; dy < P.scale_h; dy = dy + 1u) {
        let row = (plane * out_h + ih * P.scale_h + dy) * out_w + iw * P.scale_w;
        for (var dx = 0u; dx < P.scale_w; dx = dx + 1u) { total = total + src[row + dx]; }
    }
    dst[idx] = total;
}
