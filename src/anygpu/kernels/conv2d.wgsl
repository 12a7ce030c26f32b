// conv2d forward (NCHW), the KIND part of conv_gemm.wgsl. Per group g:
//   out[n, g*m + row, p] = bias[g*m + row] + sum_k weight[g*m + row, k] * patch[k, (n, p)]
// rows: m = out_c/groups output channels; columns: (n, p) over batch * out_h*out_w
// output pixels; k = (ic, r, s) over in_c/groups * kh * kw, with patch[k, (n, p)] =
// input[n, g*cg + ic, oh*stride_h - pad_h + r*dil_h, ow*stride_w - pad_w + s*dil_w].
{{PARAMS}}  // ops/conv_gen.py PARAMS["conv2d"]
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> b_source: array<f32>;  // input
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding({{OUT_BINDING}}) var<storage, read_write> out: array<f32>;
// An elementwise epilogue (ops/matmul_gen.Epilogue): its extra inputs from binding 4, store1.
{{EPILOGUE}}

fn gemm_m() -> u32 { return P.out_c / P.groups; }
fn gemm_n() -> u32 { return P.batch * P.out_h * P.out_w; }
fn gemm_k() -> u32 { return (P.in_c / P.groups) * P.kh * P.kw; }

fn column(g: u32, col: u32) -> Column {
    let out_hw = P.out_h * P.out_w;
    let p = col % out_hw;
    let ih0 = i32((p / P.out_w) * P.stride_h) - i32(P.pad_h);
    let iw0 = i32((p % P.out_w) * P.stride_w) - i32(P.pad_w);
    let plane = (col / out_hw) * P.in_c + g * (P.in_c / P.groups);
    return Column(i32(plane * P.in_h * P.in_w) + ih0 * i32(P.in_w) + iw0, ih0, iw0, col < gemm_n());
}

fn decode_k(g: u32, k: u32, kk: u32, k_end: u32) {
    let taps = P.kh * P.kw;
    let tap = k % taps;
    let dr = i32((tap / P.kw) * P.dil_h);
    let ds = i32((tap % P.kw) * P.dil_w);
    k_row[kk] = select(OUT_OF_RANGE, dr, k < k_end);
    k_col[kk] = ds;
    k_offset[kk] = i32((k / taps) * P.in_h * P.in_w) + dr * i32(P.in_w) + ds;
}

fn fetch_a(g: u32, row: u32, k: u32, kk: u32) -> f32 {
    return weight[(g * gemm_m() + row) * gemm_k() + k];
}

fn output_row_stride() -> u32 { return P.out_h * P.out_w; }

// out index of (row 0 of group g, column col).
fn output_index(g: u32, split: u32, col: u32) -> u32 {
    let out_hw = P.out_h * P.out_w;
    return ((col / out_hw) * P.out_c + g * gemm_m()) * out_hw + col % out_hw;
}

fn row_bias(g: u32, row: u32) -> f32 {
    if (P.has_bias != 0u) { return bias[g * gemm_m() + row]; }
    return 0.0;
}
