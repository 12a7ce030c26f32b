// conv2d forward on subgroup matrices: the index maths that ops/conv_sgmat.py's GEMM calls.
// Per group g: out[nb, g*M + m, p] = bias + sum_k weight[g*M + m, k] * patch[k, (nb, p)]
// with M = out_c/groups rows, columns n = (nb, p) over batch * out_h*out_w, and
// k = (ic, r, s) over in_c/groups * kh * kw; patch[k, (nb, p)] =
// input[nb, g*cg + ic, oh*stride_h - pad_h + r*dil_h, ow*stride_w - pad_w + s*dil_w].
// A = weight (rows of k halves), B = the input image, gathered through two tables:
// column(g, n) and decode_k(g, k) give (offset, row, col, _) whose sums address B.

fn gemm_m() -> u32 { return P.out_c / P.groups; }
fn gemm_n() -> u32 { return P.batch * P.out_h * P.out_w; }
fn gemm_k() -> u32 { return (P.in_c / P.groups) * P.kh * P.kw; }

fn column(g: u32, n: u32) -> vec4<i32> {
    let out_hw = P.out_h * P.out_w;
    let p = n % out_hw;
    let ih0 = i32((p / P.out_w) * P.stride_h) - i32(P.pad_h);
    let iw0 = i32((p % P.out_w) * P.stride_w) - i32(P.pad_w);
    let plane = (n / out_hw) * P.in_c + g * (P.in_c / P.groups);
    return vec4<i32>(i32(plane * P.in_h * P.in_w) + ih0 * i32(P.in_w) + iw0, ih0, iw0, 0);
}

fn decode_k(g: u32, k: u32) -> vec4<i32> {
    let taps = P.kh * P.kw;
    let tap = k % taps;
    let dr = i32((tap / P.kw) * P.dil_h);
    let ds = i32((tap % P.kw) * P.dil_w);
    return vec4<i32>(i32((k / taps) * P.in_h * P.in_w) + dr * i32(P.in_w) + ds, dr, ds, 0);
}

// Half index of A[m, k] (kt: decode_k of k).
fn a_index(g: u32, m: u32, k: u32, kt: vec4<i32>) -> u32 {
    return (g * gemm_m() + m) * gemm_k() + k;
}

// out index of (row 0 of group g, column n); rows are out_row_stride() apart.
fn out_col(g: u32, split: u32, n: u32) -> u32 {
    let out_hw = P.out_h * P.out_w;
    return ((n / out_hw) * P.out_c + g * gemm_m()) * out_hw + n % out_hw;
}

fn out_row_stride() -> u32 { return P.out_h * P.out_w; }
