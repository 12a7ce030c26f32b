// conv2d's weight gradient on subgroup matrices: the index maths that ops/conv_sgmat.py's
// GEMM calls. Per group g:
//   partial[split, g*M + m, n] = sum over k in the split of grad_out[nb, g*M + m, p] * patch[(nb, p), n]
// M = out_c/groups rows, columns n = (ic, r, s) over in_c/groups * kh * kw (the weight's
// own layout), k = (nb, p) over batch * out_h*out_w, patch as in conv_sgmat_conv2d.wgsl.
// A = grad_out (the k table's w is the grad_out index of (nb, 0, p)), B = the input image.
// The reduction is long and the output small, so it is split; the caller sums the partials.

fn gemm_m() -> u32 { return P.out_c / P.groups; }
fn gemm_n() -> u32 { return (P.in_c / P.groups) * P.kh * P.kw; }
fn gemm_k() -> u32 { return P.batch * P.out_h * P.out_w; }

fn column(g: u32, n: u32) -> vec4<i32> {
    let taps = P.kh * P.kw;
    let tap = n % taps;
    let dr = i32((tap / P.kw) * P.dil_h);
    let ds = i32((tap % P.kw) * P.dil_w);
    return vec4<i32>(i32((n / taps) * P.in_h * P.in_w) + dr * i32(P.in_w) + ds, dr, ds, 0);
}

fn decode_k(g: u32, k: u32) -> vec4<i32> {
    let out_hw = P.out_h * P.out_w;
    let nb = k / out_hw;
    let p = k % out_hw;
    let ih0 = i32((p / P.out_w) * P.stride_h) - i32(P.pad_h);
    let iw0 = i32((p % P.out_w) * P.stride_w) - i32(P.pad_w);
    let plane = nb * P.in_c + g * (P.in_c / P.groups);
    return vec4<i32>(i32(plane * P.in_h * P.in_w) + ih0 * i32(P.in_w) + iw0, ih0, iw0, i32(nb * P.out_c * out_hw + p));
}

fn a_index(g: u32, m: u32, k: u32, kt: vec4<i32>) -> u32 {
    return u32(kt.w) + (g * gemm_m() + m) * P.out_h * P.out_w;
}

fn out_col(g: u32, split: u32, n: u32) -> u32 {
    return (split * P.out_c + g * gemm_m()) * gemm_n() + n;
}

fn out_row_stride() -> u32 { return gemm_n(); }
