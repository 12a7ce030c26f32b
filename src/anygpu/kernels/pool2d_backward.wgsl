// Backward of pool2d.wgsl, one thread per input element grad_in [planes, in_h, in_w]:
// it gathers from every output window that covers it (no atomics, deterministic).
// mode 0 (max): adds grad_out where that window's recorded index is this element.
// mode 1 (avg): adds grad_out / divisor of each covering window (same divisor rule).
{{PARAMS}}  // ops/pool.py POOL_PARAMS
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> grad_out: array<f32>;
@group(0) @binding(2) var<storage, read> indices: array<i32>;
@group(0) @binding(3) var<storage, read_write> grad_in: array<f32>;

fn avg_divisor(oh: i32, ow: i32) -> f32 {
    if (P.divisor > 0u) { return f32(P.divisor); }
    let in_h = i32(P.in_h);
    let in_w = i32(P.in_w);
    let h0 = oh * i32(P.stride_h) - i32(P.pad_h);
    let w0 = ow * i32(P.stride_w) - i32(P.pad_w);
    let h_end = min(h0 + i32(P.kh), in_h + i32(P.pad_h));
    let w_end = min(w0 + i32(P.kw), in_w + i32(P.pad_w));
    if (P.count_include_pad == 1u) { return f32((h_end - h0) * (w_end - w0)); }
    return f32((min(h_end, in_h) - max(h0, 0)) * (min(w_end, in_w) - max(w0, 0)));
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let iw = i32(i % P.in_w);
    let ih = i32((i / P.in_w) % P.in_h);
    let plane = i / (P.in_w * P.in_h);
    let out_base = plane * P.out_h * P.out_w;
    let here = ih * i32(P.in_w) + iw;
    var total = 0.0;
    // Output row oh covers ih through tap r when oh*stride - pad + r*dil == ih.
    for (var r = 0i; r < i32(P.kh); r++) {
        let th = ih + i32(P.pad_h) - r * i32(P.dil_h);
        if (th < 0 || th % i32(P.stride_h) != 0) { continue; }
        let oh = th / i32(P.stride_h);
        if (oh >= i32(P.out_h)) { continue; }
        for (var s = 0i; s < i32(P.kw); s++) {
            let tw = iw + i32(P.pad_w) - s * i32(P.dil_w);
            if (tw < 0 || tw % i32(P.stride_w) != 0) { continue; }
            let ow = tw / i32(P.stride_w);
            if (ow >= i32(P.out_w)) { continue; }
            let o = out_base + u32(oh * i32(P.out_w) + ow);
            if (P.mode == 0u) {
                if (indices[o] == here) { total = total + grad_out[o]; }
            } else {
                total = total + grad_out[o] / avg_divisor(oh, ow);
            }
        }
    }
    grad_in[i] = total;
}
