// conv_transpose2d over one output phase on subgroup matrices (so conv2d's input gradient,
// with the conv2d's grad_out as the input here): the index maths that ops/conv_sgmat.py's
// GEMM calls. As kernels/conv_transpose2d.wgsl: the phase is the output rows
// oh = phase_h + stride_h*th and columns ow = phase_w + stride_w*tw; only the taps
// r = tap_r0 + rr*tap_r_step (rr < taps_r) reach it (likewise s), from input row
// ih = th + (phase_h + pad_h - r*dil_h)/stride_h, an exact division. Per group g:
//   out[nb, g*M + m, oh, ow] = sum_k weight[g*cg + ic, m, r, s] * input[nb, g*cg + ic, ih, iw]
// M = out_c/groups rows, columns n = (nb, th, tw), k = (ic, rr, ss) with cg = in_c/groups.
// A = weight (gathered: the k table's w is the weight index of (g*cg + ic, 0, r, s)),
// B = the input image.

fn gemm_m() -> u32 { return P.out_c / P.groups; }
fn gemm_n() -> u32 { return P.batch * P.phase_rows * P.phase_cols; }
fn gemm_k() -> u32 { return (P.in_c / P.groups) * P.taps_r * P.taps_s; }

fn column(g: u32, n: u32) -> vec4<i32> {
    let phase_hw = P.phase_rows * P.phase_cols;
    let th = i32((n % phase_hw) / P.phase_cols);
    let tw = i32((n % phase_hw) % P.phase_cols);
    let plane = (n / phase_hw) * P.in_c + g * (P.in_c / P.groups);
    return vec4<i32>(i32(plane * P.in_h * P.in_w) + th * i32(P.in_w) + tw, th, tw, 0);
}

fn decode_k(g: u32, k: u32) -> vec4<i32> {
    let phase_taps = P.taps_r * P.taps_s;
    let ic = k / phase_taps;
    let tap = k % phase_taps;
    let r = P.tap_r0 + (tap / P.taps_s) * P.tap_r_step;
    let s = P.tap_s0 + (tap % P.taps_s) * P.tap_s_step;
    let dh = (i32(P.phase_h + P.pad_h) - i32(r * P.dil_h)) / i32(P.stride_h);
    let dw = (i32(P.phase_w + P.pad_w) - i32(s * P.dil_w)) / i32(P.stride_w);
    let w = (g * (P.in_c / P.groups) + ic) * gemm_m() * P.kh * P.kw + r * P.kw + s;
    return vec4<i32>(i32(ic * P.in_h * P.in_w) + dh * i32(P.in_w) + dw, dh, dw, i32(w));
}

fn a_index(g: u32, m: u32, k: u32, kt: vec4<i32>) -> u32 {
    return u32(kt.w) + m * P.kh * P.kw;
}

fn out_col(g: u32, split: u32, n: u32) -> u32 {
    let phase_hw = P.phase_rows * P.phase_cols;
    let oh = P.phase_h + ((n % phase_hw) / P.phase_cols) * P.stride_h;
    let ow = P.phase_w + ((n % phase_hw) % P.phase_cols) * P.stride_w;
    return (((n / phase_hw) * P.out_c + g * gemm_m()) * P.out_h + oh) * P.out_w + ow;
}

fn out_row_stride() -> u32 { return P.out_h * P.out_w; }
