// Gradient of conv2d's weight, the KIND part of conv_gemm.wgsl. Per group g:
//   partial[split, g*m + row, j] = sum over k in the split of grad_out[n, g*m + row, p] * patch[(n, p), j]
// rows: m = out_c/groups; columns: j = (ic, r, s) over in_c/groups * kh * kw (the
// weight's own layout); k = (n, p) over batch * out_h*out_w, with patch[(n, p), j] =
// input[n, g*cg + ic, oh*stride_h - pad_h + r*dil_h, ow*stride_w - pad_w + s*dil_w].
// That reduction is long and the output small, so it is split: the caller sums the
// `splits` partials.
{{PARAMS}}  // ops/conv_gen.py PARAMS["conv2d_grad_weight"]
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> b_source: array<f32>;  // input
@group(0) @binding(2) var<storage, read> grad_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;  // partial

var<workgroup> k_grad: array<u32, TILE_K>;  // grad_out index of (n, 0, oh, ow)

fn gemm_m() -> u32 { return P.out_c / P.groups; }
fn gemm_n() -> u32 { return (P.in_c / P.groups) * P.kh * P.kw; }
fn gemm_k() -> u32 { return P.batch * P.out_h * P.out_w; }

fn column(g: u32, col: u32) -> Column {
    let taps = P.kh * P.kw;
    let tap = col % taps;
    let dr = i32((tap / P.kw) * P.dil_h);
    let ds = i32((tap % P.kw) * P.dil_w);
    return Column(i32((col / taps) * P.in_h * P.in_w) + dr * i32(P.in_w) + ds, dr, ds, col < gemm_n());
}

fn decode_k(g: u32, k: u32, kk: u32, k_end: u32) {
    let out_hw = P.out_h * P.out_w;
    let n = k / out_hw;
    let p = k % out_hw;
    let ih0 = i32((p / P.out_w) * P.stride_h) - i32(P.pad_h);
    let iw0 = i32((p % P.out_w) * P.stride_w) - i32(P.pad_w);
    let plane = n * P.in_c + g * (P.in_c / P.groups);
    k_row[kk] = select(OUT_OF_RANGE, ih0, k < k_end);
    k_col[kk] = iw0;
    k_offset[kk] = i32(plane * P.in_h * P.in_w) + ih0 * i32(P.in_w) + iw0;
    k_grad[kk] = n * P.out_c * out_hw + p;
}

fn fetch_a(g: u32, row: u32, k: u32, kk: u32) -> f32 {
    return grad_out[k_grad[kk] + (g * gemm_m() + row) * P.out_h * P.out_w];
}

fn output_row_stride() -> u32 { return gemm_n(); }

fn output_index(g: u32, split: u32, col: u32) -> u32 {
    return (split * P.out_c + g * gemm_m()) * gemm_n() + col;
}

fn row_bias(g: u32, row: u32) -> f32 { return 0.0; }
