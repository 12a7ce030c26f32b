// conv_transpose2d (NCHW, weight [in_c, out_c/groups, kh, kw]) over one output phase,
// the KIND part of conv_gemm.wgsl. The phase is the output rows oh = phase_h +
// stride_h*th and columns ow = phase_w + stride_w*tw. Within it only the taps r with
// r*dil_h = phase_h + pad_h (mod stride_h) reach an input row; they form the
// progression tap_r0 + rr*tap_r_step (rr < taps_r), likewise for s, and reach input
// row ih = th + (phase_h + pad_h - r*dil_h)/stride_h, an exact division done once per
// tap. So no product is spent on the zeros a strided scatter inserts. Per group g:
//   out[n, g*m + row, oh, ow] = bias + sum_k weight[g*cg + ic, row, r, s] * input[n, g*cg + ic, ih, iw]
// rows: m = out_c/groups; columns: (n, th, tw); k = (ic, rr, ss), cg = in_c/groups.
{{PARAMS}}  // ops/conv_gen.py PARAMS["conv_transpose2d"]
@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> b_source: array<f32>;  // input
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding({{OUT_BINDING}}) var<storage, read_write> out: array<f32>;
// An elementwise epilogue (ops/matmul_gen.Epilogue): its extra inputs from binding 4, store1.
{{EPILOGUE}}

var<workgroup> k_weight: array<u32, TILE_K>;  // weight index of (g*cg + ic, 0, r, s)

fn gemm_m() -> u32 { return P.out_c / P.groups; }
fn gemm_n() -> u32 { return P.batch * P.phase_rows * P.phase_cols; }
fn gemm_k() -> u32 { return (P.in_c / P.groups) * P.taps_r * P.taps_s; }

fn column(g: u32, col: u32) -> Column {
    let phase_hw = P.phase_rows * P.phase_cols;
    let th = i32((col % phase_hw) / P.phase_cols);
    let tw = i32((col % phase_hw) % P.phase_cols);
    let plane = (col / phase_hw) * P.in_c + g * (P.in_c / P.groups);
    return Column(i32(plane * P.in_h * P.in_w) + th * i32(P.in_w) + tw, th, tw, col < gemm_n());
}

fn decode_k(g: u32, k: u32, kk: u32, k_end: u32) {
    let phase_taps = P.taps_r * P.taps_s;
    let ic = k / phase_taps;
    let tap = k % phase_taps;
    let r = P.tap_r0 + (tap / P.taps_s) * P.tap_r_step;
    let s = P.tap_s0 + (tap % P.taps_s) * P.tap_s_step;
    let dh = (i32(P.phase_h + P.pad_h) - i32(r * P.dil_h)) / i32(P.stride_h);
    let dw = (i32(P.phase_w + P.pad_w) - i32(s * P.dil_w)) / i32(P.stride_w);
    k_row[kk] = select(OUT_OF_RANGE, dh, k < k_end);
    k_col[kk] = dw;
    k_offset[kk] = i32(ic * P.in_h * P.in_w) + dh * i32(P.in_w) + dw;
    k_weight[kk] = (g * (P.in_c / P.groups) + ic) * gemm_m() * P.kh * P.kw + r * P.kw + s;
}

fn fetch_a(g: u32, row: u32, k: u32, kk: u32) -> f32 {
    return weight[k_weight[kk] + row * P.kh * P.kw];
}

fn output_row_stride() -> u32 { return P.out_h * P.out_w; }

fn output_index(g: u32, split: u32, col: u32) -> u32 {
    let phase_hw = P.phase_rows * P.phase_cols;
    let oh = P.phase_h + ((col % phase_hw) / P.phase_cols) * P.stride_h;
    let ow = P.phase_w + ((col % phase_hw) % P.phase_cols) * P.stride_w;
    return (((col / phase_hw) * P.out_c + g * gemm_m()) * P.out_h + oh) * P.out_w + ow;
}

fn row_bias(g: u32, row: u32) -> f32 {
    if (P.has_bias != 0u) { return bias[g * gemm_m() + row]; }
    return 0.0;
}
