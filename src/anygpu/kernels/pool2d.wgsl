// 2-D max / average pooling forward over planes x [planes, in_h, in_w] (planes = N*C),
// one thread per output element out [planes, out_h, out_w].
// mode 0 (max): padding counts as -inf, NaN wins (as in torch); indices[i] = ih*in_w + iw
//   of the chosen element (torch's return_indices layout).
// mode 1 (avg): sum over the window / divisor, where the divisor is the window clipped to
//   the padded input (count_include_pad = 1), to the input (0), or `divisor` when > 0.
{{PARAMS}}  // ops/pool.py POOL_PARAMS
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read_write> indices: array<i32>;

// A bit test: compilers may fold `v != v` to false.
fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P.n) { return; }
    let ow = i32(i % P.out_w);
    let oh = i32((i / P.out_w) % P.out_h);
    let plane = i / (P.out_w * P.out_h);
    let base = plane * P.in_h * P.in_w;
    let h0 = oh * i32(P.stride_h) - i32(P.pad_h);
    let w0 = ow * i32(P.stride_w) - i32(P.pad_w);
    let in_h = i32(P.in_h);
    let in_w = i32(P.in_w);
    if (P.mode == 0u) {
        // -inf: a window wholly in the padding, as in torch. Read from a var: Tint (Dawn) refuses
        // an inf that a constant expression makes, as bitcast<f32>(0xff800000u) would be.
        var neg_inf_bits = 0xff800000u;
        var best = bitcast<f32>(neg_inf_bits);
        var best_index = -1;
        for (var r = 0i; r < i32(P.kh); r++) {
            let ih = h0 + r * i32(P.dil_h);
            if (ih < 0 || ih >= in_h) { continue; }
            for (var s = 0i; s < i32(P.kw); s++) {
                let iw = w0 + s * i32(P.dil_w);
                if (iw < 0 || iw >= in_w) { continue; }
                let v = x[base + u32(ih * in_w + iw)];
                if (best_index < 0 || v > best || is_nan(v)) {
                    best = v;
                    best_index = ih * in_w + iw;
                    if (is_nan(v)) { break; }
                }
            }
            if (is_nan(best)) { break; }
        }
        out[i] = best;
        indices[i] = best_index;
        return;
    }
    // Average: the window clipped to the padded input, then to the input itself.
    let h_end_padded = min(h0 + i32(P.kh), in_h + i32(P.pad_h));
    let w_end_padded = min(w0 + i32(P.kw), in_w + i32(P.pad_w));
    let padded_count = (h_end_padded - h0) * (w_end_padded - w0);
    let h_start = max(h0, 0);
    let w_start = max(w0, 0);
    let h_end = min(h_end_padded, in_h);
    let w_end = min(w_end_padded, in_w);
    if (h_start >= h_end || w_start >= w_end) {  // a window wholly in the padding
        out[i] = 0.0;
        return;
    }
    var total = 0.0;
    for (var ih = h_start; ih < h_end; ih++) {
        for (var iw = w_start; iw < w_end; iw++) {
            total = total + x[base + u32(ih * in_w + iw)];
        }
    }
    var divisor = f32(padded_count);
    if (P.divisor > 0u) {
        divisor = f32(P.divisor);
    } else if (P.count_include_pad == 0u) {
        divisor = f32((h_end - h_start) * (w_end - w_start));
    }
    out[i] = total / divisor;
}
